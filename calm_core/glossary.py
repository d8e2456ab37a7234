"""The studio's words, declared once: each term a practitioner meets, in one or two plain
sentences.

    define("ECE")                 # the definition, for a help tooltip or a caption
    lookup("calm_theta_only")     # its Term ("CALM, adapter only"), or None
    tooltip("ECE", "NLL")         # "**ECE**: ...\\n\\n**NLL**: ..." for a widget's help=
    markdown()                    # docs/glossary.md, written by `python -m calm_core.glossary`

Why one declaration: the pages' tooltips and captions and docs/glossary.md are built from
these entries, so a page and the docs cannot define a word two ways, and a test
(tests/test_glossary.py) fails when a page shows a variant, a flag or a metric that has no
entry here, or when docs/glossary.md is not what `markdown()` writes.

A term is found by its name or any of its `also` spellings (the variant keys and metric
columns the tables show: "ts", "ece_10"), exactly first, then ignoring case. A trained
method's adapter-only variant, `<method>_theta_only` or "<its name>, adapter only", is
found as "adapter only" when the method itself is defined here; `calm_theta_only` ("CALM,
adapter only") has its own entry.

The entries themselves are plain data, calm_core/glossary.toml (package data), read once at
import. Nothing here imports the rest of calm_core (layer 1), and the test checks the words
against the registries (calibrators, methods, metric columns, flags).
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

THETA_ONLY = "_theta_only"  # the suffix of a trained method's adapter-only variant
ADAPTER_ONLY = ", adapter only"  # and of its name in full (results/verdict.py variant_label)


@dataclass(frozen=True)
class Term:
    """One word of the studio: `name` as the docs head it, its `definition` in plain words,
    the `also` spellings pages show (variant keys, column names, symbols), and the `group`
    it is listed under in docs/glossary.md."""

    name: str
    definition: str
    group: str
    also: tuple[str, ...] = ()

    @property
    def spellings(self) -> tuple[str, ...]:
        """The name first, then the other spellings."""
        return (self.name, *self.also)


def _read_terms() -> tuple[tuple[str, ...], tuple[Term, ...]]:
    """(the groups in docs/glossary.md's order, every Term) from calm_core/glossary.toml."""
    data = tomllib.loads(resources.files("calm_core").joinpath("glossary.toml").read_text(encoding="utf-8"))
    terms = tuple(
        Term(entry["name"], entry["definition"], entry["group"], tuple(entry.get("also", ()))) for entry in data["term"]
    )
    return tuple(data["groups"]), terms


GROUPS, TERMS = _read_terms()


def _index() -> tuple[dict[str, Term], dict[str, Term]]:
    """Every spelling -> its Term, exactly and case-folded (the first declared wins)."""
    exact: dict[str, Term] = {}
    folded: dict[str, Term] = {}
    for term in TERMS:
        for spelling in term.spellings:
            exact.setdefault(spelling, term)
            folded.setdefault(spelling.casefold(), term)
    return exact, folded


def lookup(word: str) -> Term | None:
    """The Term a page's word names (see the module docstring), or None."""
    exact, folded = _index()
    found = exact.get(word) or folded.get(word.casefold())
    if found is None:
        for suffix in (THETA_ONLY, ADAPTER_ONLY):  # "scalar_theta_only", "CALM with one temperature, adapter only"
            if word.endswith(suffix) and lookup(word.removesuffix(suffix)):
                return exact["adapter only"]
    return found


def define(word: str) -> str:
    """The definition of `word`. A page asking for a word with no entry fails here, loudly:
    every word a page defines must be in the glossary."""
    term = lookup(word)
    if term is None:
        raise KeyError(f"Expected a glossary entry for {word!r} (calm_core/glossary.py), but there is none")
    return term.definition


def tooltip(*words: str) -> str:
    """The definitions of `words` as a help tooltip, one Markdown paragraph each, headed by
    the word as the page shows it."""
    return "\n\n".join(f"**{word}**: {define(word)}" for word in dict.fromkeys(words))


def line(*words: str) -> str:
    """The definitions of `words` in one line for a caption: "ECE: ... · NLL: ..."."""
    return " · ".join(f"{word}: {define(word)}" for word in dict.fromkeys(words))


HEADER = (
    "# Glossary\n\n"
    "The words of CALM Studio in plain language. The studio's help tooltips and captions come from the same "
    "declaration, `calm_core/glossary.toml`; this file is generated from it by "
    "`python -m calm_core.glossary` (edit the declaration, then run that command; "
    "`tests/test_glossary.py` fails when the two differ).\n"
)


def markdown() -> str:
    """docs/glossary.md: a section per group, a line per term with its other spellings."""
    parts = [HEADER]
    for group in GROUPS:
        parts.append(f"\n## {group}\n")
        for term in (t for t in TERMS if t.group == group):
            also = f" ({', '.join(f'`{s}`' for s in term.also)})" if term.also else ""
            parts.append(f"- **{term.name}**{also}: {term.definition}")
    return "\n".join(parts) + "\n"


DOC_PATH = Path(__file__).resolve().parent.parent / "docs" / "glossary.md"


def main(argv: list[str] | None = None) -> int:
    """Write docs/glossary.md from TERMS (`--check`: say whether it is up to date, exit 1 if not)."""
    parser = argparse.ArgumentParser(prog="python -m calm_core.glossary", description=main.__doc__)
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    parser.add_argument("--out", type=Path, default=DOC_PATH, help="where the Markdown goes")
    args = parser.parse_args(argv)
    text = markdown()
    if args.check:
        current = args.out.read_text(encoding="utf-8") if args.out.is_file() else ""
        print(f"{args.out}: {'up to date' if current == text else 'out of date: run python -m calm_core.glossary'}")
        return 0 if current == text else 1
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out} ({len(TERMS)} terms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
