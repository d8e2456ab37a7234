"""The Data page's mapping form as plain values: a `ColumnMapping` <-> the values of
its widgets (`form_values` <-> `mapping_from_form`).

Kept out of the page (app/pages/data/data.py) so that the translation, and the DataError
that names the widget a person must set, are tested without Streamlit.
"""

from __future__ import annotations

from typing import Any

from calm_core.data.guess import guess_kind
from calm_core.data.mapping import ColumnMapping
from calm_core.data.schema import DataError


def form_values(mapping: ColumnMapping, columns: list[str]) -> dict[str, Any]:
    """The Data page's widget values for `mapping` over a file's `columns` (dotted paths
    included): a column the file lacks becomes None (an unset widget), never an error."""

    def have(column: str | None) -> str | None:
        return column if column in columns else None

    return {
        "kind": guess_kind(columns, mapping),
        "question": have(mapping.question),
        "layout": "columns" if isinstance(mapping.choices, tuple) else "list",
        "options": [c for c in mapping.choice_columns if c in columns] if isinstance(mapping.choices, tuple) else [],
        "list": have(mapping.choices) if isinstance(mapping.choices, str) else None,
        "answer": have(mapping.answer),
        "answer_form": mapping.answer_form,
        "labels": have(mapping.labels),
        "answers": have(mapping.answers),
        "id": have(mapping.id),
        "subject": have(mapping.subject),
    }


def mapping_from_form(values: dict[str, Any], columns: list[str]) -> ColumnMapping:
    """The Data page's widget values (`form_values` keys) -> a ColumnMapping. DataError
    names the widget to set. An optional column left unset stays off, even when the
    file has a column of the default name."""

    def need(key: str, what: str) -> str:
        if not values.get(key):
            raise DataError(f"Expected {what}, but none is chosen")
        chosen: str = values[key]
        return chosen

    fields: dict[str, Any] = {"question": need("question", "a question column")}
    if values.get("kind", "mc") == "mc":
        if values.get("layout") == "list":
            fields["choices"] = need("list", "the column holding the list of options")
        elif len(values.get("options") or ()) < 2:
            raise DataError(
                "Expected at least 2 option columns (in order: the first is A), or one list column, "
                f"but got {len(values.get('options') or ())}"
            )
        else:
            fields["choices"] = tuple(values["options"])
        fields["answer"] = need("answer", "an answer column")
        fields["answer_form"] = values.get("answer_form") or "auto"
        if fields["answer_form"] == "label":
            fields["labels"] = need("labels", "the column of option labels")
    else:
        fields["answers"] = need("answers", "the column of accepted answers")
    for key in ("id", "subject"):  # unset: off, unless the default name is no column anyway
        fields[key] = values.get(key) or (None if key in columns else key)
    return ColumnMapping(**fields)
