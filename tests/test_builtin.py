"""Tests for the built-in demo datasets (calm_core.data.builtin) and their fact tables."""

from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import asdict

import pytest

from calm_core.data import builtin
from calm_core.data.builtin import (
    DOMAINS,
    N_CHOICES,
    SPLITS,
    assign_splits,
    builtin_names,
    domain_questions,
    evaluate,
    load_builtin,
)
from calm_core.data.facts import ANIMAL_CLASSES, CAPITALS, CONVERSIONS, ELEMENTS, SI_PREFIXES, SI_UNITS
from calm_core.data.facts.animals import ANIMAL_GROUPS
from calm_core.data.schema import DataError, MCItem, validate_mc_record

ALL = [(d, s) for d in DOMAINS for s in SPLITS]


def _items(domain: str, seed: int = 0) -> list[MCItem]:
    return [item for split in SPLITS for item in load_builtin(domain, split, seed).items]


# ---------------------------------------------------------------- API and registry


def test_registry_lists_every_domain_and_split():
    assert set(DOMAINS) == set(builtin._BUILDERS)
    assert {"capitals", "chemical_symbols", "arithmetic", "units", "animal_classes"} <= set(DOMAINS)
    mc = [f"builtin/{d}/{s}" for d in DOMAINS for s in SPLITS]
    open_answer = [f"builtin/{d}_open/{s}" for d in DOMAINS for s in SPLITS]
    assert builtin_names() == mc + open_answer
    assert SPLITS == ("train", "validation", "test")


@pytest.mark.parametrize("domain,split", ALL)
def test_report_shape(domain, split):
    report = load_builtin(domain, split)
    assert report.name == f"builtin/{domain}/{split}"
    assert report.kind == "mc"
    assert report.rejected == []
    assert report.items, "every split must have items"
    assert [item.id for item in report.items] == [f"{domain}-{split}-{i:04d}" for i in range(len(report.items))]


@pytest.mark.parametrize("domain", DOMAINS)
def test_each_domain_has_enough_items(domain):
    assert len(_items(domain)) >= 150


def test_unknown_domain_lists_valid_names():
    expected = r"Unknown built-in dataset 'foo'; expected one of: capitals, .*animal_classes"
    with pytest.raises(DataError, match=expected):
        load_builtin("foo", "test")


def test_unknown_split_lists_valid_names():
    with pytest.raises(DataError, match=r"Unknown split 'dev'.*expected one of: train, validation, test"):
        load_builtin("capitals", "dev")


@pytest.mark.parametrize("seed", ["1", 1.5, True, None])
def test_non_int_seed_is_rejected(seed):
    with pytest.raises(DataError, match="Expected `seed` to be an int"):
        load_builtin("capitals", "test", seed)


# ---------------------------------------------------------------- items are valid


@pytest.mark.parametrize("domain,split", ALL)
def test_items_round_trip_through_validation(domain, split):
    for row, item in enumerate(load_builtin(domain, split).items, start=1):
        record = asdict(item)
        parsed, error = validate_mc_record(record, "builtin", row)
        assert error is None, str(error)
        assert parsed == item
        assert item.subject == domain
        assert item.n_choices == N_CHOICES
        assert len(set(item.choices)) == N_CHOICES


@pytest.mark.parametrize("domain", DOMAINS)
def test_gold_choice_is_the_facts_answer(domain):
    answer_of = {q.question: q.answer for q in domain_questions(domain)}
    for item in _items(domain, seed=3):
        assert item.choices[item.answer] == answer_of[item.question]
        assert sum(c == answer_of[item.question] for c in item.choices) == 1


@pytest.mark.parametrize("domain", DOMAINS)
def test_question_texts_are_unique(domain):
    # the per-item RNG is seeded by the question text, and ids must map to one question
    questions = [q.question for q in domain_questions(domain)]
    assert len(questions) == len(set(questions))


@pytest.mark.parametrize("domain", DOMAINS)
def test_every_question_has_enough_distractors(domain):
    for q in domain_questions(domain):
        assert len(q.candidates) >= N_CHOICES - 1, q
        assert q.answer not in q.candidates
        assert len(set(q.candidates)) == len(q.candidates)


# ---------------------------------------------------------------- determinism and seeds


@pytest.mark.parametrize("domain", DOMAINS)
def test_same_seed_same_items(domain):
    assert _items(domain, seed=7) == _items(domain, seed=7)


def test_global_rng_is_neither_used_nor_disturbed():
    random.seed(1)
    first = _items("capitals")
    random.seed(2)
    state = random.getstate()
    second = _items("capitals")
    assert first == second
    assert random.getstate() == state


@pytest.mark.parametrize("domain", DOMAINS)
def test_other_seed_changes_choices_not_questions(domain):
    for split in SPLITS:
        a = load_builtin(domain, split, seed=0).items
        b = load_builtin(domain, split, seed=1).items
        assert [(i.id, i.question) for i in a] == [(i.id, i.question) for i in b]
        assert [i.choices[i.answer] for i in a] == [i.choices[i.answer] for i in b]
    a, b = _items(domain, seed=0), _items(domain, seed=1)
    assert sum(x.answer != y.answer for x, y in zip(a, b)) > len(a) / 2  # about 3/4 expected


# ---------------------------------------------------------------- splits


@pytest.mark.parametrize("domain", DOMAINS)
def test_facts_never_cross_splits(domain):
    key_of = {q.question: q.key for q in domain_questions(domain)}
    keys = {s: {key_of[i.question] for i in load_builtin(domain, s).items} for s in SPLITS}
    assert not keys["train"] & keys["validation"]
    assert not keys["train"] & keys["test"]
    assert not keys["validation"] & keys["test"]
    assert keys["train"] | keys["validation"] | keys["test"] == set(key_of.values())


def test_both_directions_of_an_element_share_a_split():
    test_questions = " ".join(i.question for i in load_builtin("chemical_symbols", "test").items)
    for _, symbol, name in ELEMENTS:
        asks_name_to_symbol = f" {name.lower()}?" in test_questions
        asks_symbol_to_name = re.search(rf"symbol {symbol}\b", test_questions) is not None
        assert asks_name_to_symbol == asks_symbol_to_name, name


def test_split_is_60_20_20_and_seed_free():
    keys = [f"fact {i}" for i in range(100)]
    splits = assign_splits(keys)
    assert Counter(splits.values()) == {"train": 60, "validation": 20, "test": 20}
    assert assign_splits(reversed(keys)) == splits  # table order does not matter
    for domain in DOMAINS:
        sizes = [len(load_builtin(domain, s, seed=5).items) for s in SPLITS]
        assert sizes == [len(load_builtin(domain, s, seed=0).items) for s in SPLITS]


# ---------------------------------------------------------------- gold position balance


def test_gold_positions_are_balanced():
    counts = Counter(item.answer for domain in DOMAINS for item in _items(domain))
    n = sum(counts.values())
    expected = n / N_CHOICES
    chi2 = sum((counts[k] - expected) ** 2 / expected for k in range(N_CHOICES))
    assert set(counts) == set(range(N_CHOICES))
    assert chi2 < 16.27, counts  # 3 degrees of freedom, p = 0.001


@pytest.mark.parametrize("domain", ["capitals", "arithmetic", "animal_classes"])
def test_each_position_gets_a_fair_share_per_domain(domain):
    counts = Counter(item.answer for item in _items(domain))
    n = sum(counts.values())
    assert all(0.15 * n < counts[k] < 0.35 * n for k in range(N_CHOICES)), counts


# ---------------------------------------------------------------- arithmetic

EXPR = re.compile(r"(\d+) ([+\-×]) (\d+)")


def test_arithmetic_answers_are_correct():
    items = _items("arithmetic")
    assert len(items) == builtin.ARITHMETIC_N_FACTS
    for item in items:
        a, op, b = EXPR.search(item.question).groups()
        truth = {"+": int(a) + int(b), "-": int(a) - int(b), "×": int(a) * int(b)}[op]
        assert int(item.choices[item.answer]) == truth, item
        assert all(int(c) != truth for k, c in enumerate(item.choices) if k != item.answer)


def test_arithmetic_operands_and_operators():
    expressions = builtin._arithmetic_expressions()
    assert len(set(expressions)) == len(expressions)
    assert {op for _, op, _ in expressions} == {"+", "-", "×"}
    assert all(1 <= a <= 99 and 1 <= b <= 99 for a, _, b in expressions)
    assert all(evaluate(a, op, b) >= 0 for a, op, b in expressions)
    assert evaluate(12, "×", 7) == 84 and evaluate(12, "-", 7) == 5


def test_arithmetic_distractors_are_near_misses():
    for item in _items("arithmetic"):
        truth = int(item.choices[item.answer])
        # largest miss: one operand too many (<= 99) or swapped digits (<= 81)
        assert all(abs(int(c) - truth) <= 99 for c in item.choices), item


# ---------------------------------------------------------------- fact tables


@pytest.mark.parametrize(
    "keys",
    [
        [country for country, _ in CAPITALS],
        [name for _, _, name in ELEMENTS],
        [animal for animal, _ in ANIMAL_CLASSES],
        [unit for unit, _, _ in SI_UNITS],
        [prefix for prefix, _ in SI_PREFIXES],
        [(part, whole) for part, whole, _ in CONVERSIONS],
    ],
    ids=["capitals", "elements", "animals", "si_units", "si_prefixes", "conversions"],
)
def test_tables_have_no_duplicate_keys(keys):
    assert [k for k, n in Counter(keys).items() if n > 1] == []


def test_one_to_one_tables_have_unique_values():
    assert len({c for _, c in CAPITALS}) == len(CAPITALS)
    for column in range(3):
        assert len({row[column] for row in ELEMENTS}) == len(ELEMENTS)
    for column in range(3):
        assert len({row[column] for row in SI_UNITS}) == len(SI_UNITS)
    assert len({e for _, e in SI_PREFIXES}) == len(SI_PREFIXES)


def test_elements_are_the_118_in_order():
    assert [z for z, _, _ in ELEMENTS] == list(range(1, 119))
    assert all(re.fullmatch(r"[A-Z][a-z]?", s) for _, s, _ in ELEMENTS)


def test_animal_groups_are_the_known_eight():
    assert {g for _, g in ANIMAL_CLASSES} == set(ANIMAL_GROUPS)
    assert len(ANIMAL_CLASSES) >= 150


def test_conversion_values_are_positive_numbers():
    assert all(float(v) > 0 for _, _, v in CONVERSIONS)


@pytest.mark.parametrize(
    "table,key,value",
    [
        (CAPITALS, "France", "Paris"),
        (CAPITALS, "Kazakhstan", "Astana"),
        (CAPITALS, "Burundi", "Gitega"),
        (CAPITALS, "Myanmar", "Naypyidaw"),
        (CAPITALS, "Australia", "Canberra"),
        (CAPITALS, "the United States", "Washington, D.C."),
        (ANIMAL_CLASSES, "blue whale", "mammal"),
        (ANIMAL_CLASSES, "whale shark", "fish"),
        (ANIMAL_CLASSES, "axolotl", "amphibian"),
        (ANIMAL_CLASSES, "tick", "arachnid"),
        (ANIMAL_CLASSES, "woodlouse", "crustacean"),
        (SI_PREFIXES, "micro", -6),
    ],
)
def test_spot_checked_facts(table, key, value):
    assert dict(table)[key] == value


def test_spot_checked_elements_and_units():
    by_name = {n: (z, s) for z, s, n in ELEMENTS}
    assert by_name["Iron"] == (26, "Fe") and by_name["Tungsten"] == (74, "W")
    assert by_name["Oganesson"] == (118, "Og") and by_name["Sodium"] == (11, "Na")
    units = {u: (s, q) for u, s, q in SI_UNITS}
    assert units["newton"] == ("N", "force") and units["siemens"] == ("S", "electrical conductance")
    conversions = {(p, w): v for p, w, v in CONVERSIONS}
    assert conversions[("centimetres", "a metre")] == "100" and conversions[("feet", "a mile")] == "5280"


def test_capitals_never_repeat_the_country_name():
    # such items would give the answer away (e.g. Mexico -> Mexico City)
    for country, city in CAPITALS:
        name = country.removeprefix("the ")
        assert name.lower() not in city.lower() and city.lower() not in name.lower(), country
