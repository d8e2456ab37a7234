"""The Data page says what is true of the file and the set in front of it (issue 49).

Replacing an upload with another file suggests the new file's name under "Save as" (the
first file's name stayed, so saving stored the second file under the first one's name);
a name the person typed for this file is theirs and stays. A set a finished run scored,
where the model as it is was not above chance, is said not to be known by that model.

    .venv/bin/python -m pytest tests/test_data_page_truth.py -q
"""

from __future__ import annotations

import pytest

CSV = b"question,A,B,C,answer\nCapital of Peru?,Lima,Quito,Bogota,A\nLargest ocean?,Atlantic,Pacific,Indian,B\n"


def _upload(at, name: str) -> None:
    at.get("file_uploader")[0].set_value((name, CSV, "text/csv")).run()
    assert not at.exception, at.exception


def test_save_as_follows_the_newly_uploaded_file(open_page, tiny_everywhere) -> None:
    at = open_page("../pages/data/data.py")
    _upload(at, "a.csv")
    assert at.text_input(key="data_name").value == "a"
    _upload(at, "b.csv")
    assert at.text_input(key="data_name").value == "b"
    at.text_input(key="data_name").set_value("my quiz").run()  # typed for this file: kept on a rerun
    at.selectbox(key="data_map_answer_form").set_value("letter").run()
    assert at.text_input(key="data_name").value == "my quiz"
    at.multiselect(key="data_map_options").set_value(["A"]).run()  # an error: no form is drawn
    assert at.error and not any(w.key == "data_name" for w in at.text_input)
    at.multiselect(key="data_map_options").set_value(["A", "B", "C"]).run()
    assert at.text_input(key="data_name").value in ("my quiz", "b")  # never empty
    _upload(at, "c.csv")  # a new file: its own name again
    assert at.text_input(key="data_name").value == "c"


@pytest.mark.parametrize("known", [False, True])
def test_a_set_a_finished_run_did_not_know_is_said_so_beside_it(open_page, tiny_everywhere, known: bool) -> None:
    """The run's model as it is answered 0.200 [0.100, 0.320] on 4 options: not above 1/K by
    its interval, so choosing the set to split says so, with the run, before training on it."""
    from calm_core.io import atomic_write_json
    from calm_core.runs.layout import RESULTS
    from tests.test_knowing import _base_at
    from tests.test_verdict import DATASET, finished_run, results

    run = finished_run(recommended="ts")
    atomic_write_json(run.path / RESULTS, _base_at(results(recommended="ts"), *((0.4, 0.27, 0.53) if known else
                                                                                  (0.2, 0.1, 0.32))))
    at = open_page("../pages/data/data.py")
    at.selectbox(key="data_split_source").set_value(DATASET).run()
    assert not at.exception, at.exception
    notes = [w.value for w in at.warning if "does not know" in w.value]
    if known:
        assert notes == []
        return
    assert notes == [
        f"This model does not know this data: run `{run.run_id}` scored it 0.200 [0.100, 0.320] right as it is, "
        "not above chance (1/K = 0.250) by its 90% interval. Calibration cannot make its answers right here, "
        "only its confidence honest about them."
    ]
    at.selectbox(key="data_split_source").set_value("builtin/capitals/train").run()  # a set no run scored
    assert not any("does not know" in w.value for w in at.warning)
