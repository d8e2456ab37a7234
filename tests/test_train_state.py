"""The Train page keeps one state: its banner, its data pickers and the configuration
Launch sends agree, also after the person has been on another page and comes back.

Streamlit forgets a widget's value on a run where the widget is not drawn (any other
page), while a plain session key (the split taken from Data) survives: the banner then
named the user's split above pickers back at the built-in demo, and Launch trained on
the demo. The browser walk of the same story is tests/test_browser_train_state.py.
"""

from __future__ import annotations

from types import SimpleNamespace

from app.widgets.keys import CALIBRATE_SPLIT


def _split_from_data_page(at) -> dict:
    """What Data's *Calibrate this dataset* sends: a saved split of a built-in set."""
    from calm_core.data.split import split_dataset

    record = split_dataset("builtin/capitals/train", sizes=(0.4, 0.4, 0.2), out="caps")
    sent = {**record.names, "source": record.source, "sizes": record.sizes}
    at.session_state[CALIBRATE_SPLIT] = sent
    return sent


def _pickers(at) -> tuple[str, str, str]:
    return (
        at.selectbox(key="train_data").value,
        at.selectbox(key="train_heldout").value,
        at.multiselect(key="train_evals").value[0],
    )


def _banner(at) -> list[str]:
    return [i.value for i in at.info if i.value.startswith("Calibrating ")]


def test_train_page_back_from_another_page_keeps_the_split_its_banner_names(open_page, tiny_everywhere,
                                                                            monkeypatch) -> None:
    import calm_core.launch

    at = open_page("../pages/data/data.py")
    split = _split_from_data_page(at)
    parts = (split["train"], split["heldout"], split["test"])
    at.switch_page("../pages/train/train.py").run()
    assert _pickers(at) == parts and _banner(at)
    at.radio(key="train_calibrate_on").set_value("all").run()  # a choice of the person's own, kept too
    for elsewhere in ("../pages/monitor/monitor.py", "../pages/data/data.py"):
        at.switch_page(elsewhere).run()
        assert not at.exception, at.exception
        at.switch_page("../pages/train/train.py").run()
        assert not at.exception, at.exception
        assert _pickers(at) == parts, elsewhere
        assert _banner(at) == [
            f"Calibrating `{split['source']}`: S_T, S_V and the test part come from its split (41 / 41 / 21 items); "
            "one out-of-domain set shows transfer. The time estimate is in section 4, **Cost and launch**."
        ]
        assert at.markdown[0].value.startswith(f"Fine-tune the model on your own questions, `{split['source']}`")
        assert at.radio(key="train_calibrate_on").value == "all"
    sent = []
    monkeypatch.setattr(
        calm_core.launch, "launch_training", lambda cfg, **kw: (sent.append(cfg), (SimpleNamespace(run_id="r"), True))[1]
    )
    at.button(key="train_launch").click().run()
    assert not at.exception, at.exception
    assert [(c.train_data, c.heldout_data, c.eval_data[0], c.calibrate_on) for c in sent] == [(*parts, "all")]


def test_train_page_banner_goes_when_the_person_picks_other_data(open_page, tiny_everywhere) -> None:
    """The banner and the opening describe what the pickers hold: once S_T is another set,
    neither names the split any more."""
    at = open_page("../pages/data/data.py")
    _split_from_data_page(at)
    at.switch_page("../pages/train/train.py").run()
    at.selectbox(key="train_data").set_value("builtin/units/train").run()
    assert not _banner(at)
    at.switch_page("../pages/monitor/monitor.py").run()
    at.switch_page("../pages/train/train.py").run()
    assert at.selectbox(key="train_data").value == "builtin/units/train" and not _banner(at)
