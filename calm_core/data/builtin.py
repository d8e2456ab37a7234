"""Built-in demo MCQA datasets, generated from the fact tables in `calm_core.data.facts`.

Each domain turns a table of public facts into 4-choice questions; the domains differ
in how hard they are for a small model, which is what makes them useful for showing
over-confidence. Measured once with SmolLM2-135M-Instruct, cloze scoring
("Question: ...\nAnswer: <choice>", validation + test): capitals ~0.75-0.85,
units / animal_classes ~0.5, chemical_symbols ~0.47, atomic_numbers ~0.33,
arithmetic ~0.24 (chance is 0.25). With lettered A-D prompts that model sits near
chance on every domain.

    from calm_core.data.builtin import load_builtin, builtin_names
    report = load_builtin("capitals", "test", seed=0)   # LoadReport "builtin/capitals/test"
    report.items[0]  # MCItem(id="capitals-test-0000", question=..., choices=(4 strings), ...)
    builtin_names()  # ["builtin/capitals/train", ..., "builtin/capitals_open/train", ...]

Every domain also comes as open-answer questions, `<domain>_open` (same questions,
same splits, no options: OpenItem with the one gold answer), for open-ended QA
(calm_core.generative) on facts a small model partly knows.

Two kinds of randomness, kept apart on purpose:
- Which split a fact lands in depends only on the domain's set of fact keys (ranked
  by a SHA-256 hash, cut 60/20/20), never on the seed or the table order, so
  changing the seed never moves a test fact into train. All questions on one fact
  (e.g. name -> symbol and symbol -> name) share its split.
- The seed only decides the distractors and the gold position, through a
  `random.Random` per item; Python's global RNG and `hash()` are never used.
"""

from __future__ import annotations

import hashlib
import math
import numbers
import random
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Iterable

from calm_core.data.facts import ANIMAL_CLASSES, CAPITALS, CONVERSIONS, ELEMENTS, SI_PREFIXES, SI_UNITS
from calm_core.data.schema import DataError, LoadReport, MCItem, OpenItem

SPLITS = ("train", "validation", "test")
OPEN_SUFFIX = "_open"  # `<domain>_open`: the domain's questions as open answers
N_CHOICES = 4  # the gold answer plus three distractors
SPLIT_FRACTIONS = (0.6, 0.2, 0.2)  # train / validation / test, as shares of a domain's facts
ARITHMETIC_N_FACTS = 600  # distinct expressions; generated, so it can be larger than a table
NEAR_K = 6  # numeric distractors come from the NEAR_K values closest to the answer
# Fixed, not the user's seed: which expressions exist (and so which are in test)
# must not change when the user changes the seed.
_ARITHMETIC_FACT_SEED = "calm-builtin-arithmetic-v1"

DOMAINS: dict[str, str] = {
    "capitals": f"Country -> capital city ({len(CAPITALS)} sovereign states).",
    "chemical_symbols": f"Element name -> chemical symbol and back (all {len(ELEMENTS)} elements).",
    "atomic_numbers": "Element <-> atomic number; distractors are table neighbours (hard).",
    "arithmetic": "1-2 digit addition, subtraction, multiplication; near-miss numeric distractors.",
    "units": "SI units and their quantities and symbols, SI prefixes, everyday unit conversions.",
    "animal_classes": "Animal -> group (mammal, bird, reptile, amphibian, fish, insect, arachnid, crustacean).",
}


@dataclass(frozen=True)
class FactQuestion:
    """One question about one fact, before the seed picks distractors and gold position."""

    key: str  # the fact asked about; decides the split, shared by all questions on it
    question: str
    answer: str
    candidates: tuple[str, ...]  # wrong answers to draw distractors from, never the answer


# ---------------------------------------------------------------- stable hashing


def _stable_int(text: str) -> int:
    """A process-independent hash (Python's `hash()` changes with PYTHONHASHSEED)."""
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big")


def assign_splits(keys: Iterable[str]) -> dict[str, str]:
    """Split facts 60/20/20 by key: rank the keys by a stable hash and cut the ranking.

    Exact proportions even for a 100-fact table (a per-key hash bucket alone is off by
    several facts), and still independent of the seed and of the table's order.
    """
    ranked = sorted(dict.fromkeys(keys), key=lambda k: (_stable_int(f"split/{k}"), k))
    end_train = round(SPLIT_FRACTIONS[0] * len(ranked))
    end_validation = end_train + round(SPLIT_FRACTIONS[1] * len(ranked))
    return {
        key: "train" if rank < end_train else "validation" if rank < end_validation else "test"
        for rank, key in enumerate(ranked)
    }


def _phrase(key: str, kind: str, templates: tuple[str, ...], **fields: str) -> str:
    """Fill one of `templates`, chosen by the key so a question's text never depends on the seed."""
    template = templates[_stable_int(f"template/{kind}/{key}") % len(templates)]
    return template.format(**fields)


# ---------------------------------------------------------------- distractor pools


def _others(answer: str, pool: Iterable[str]) -> tuple[str, ...]:
    """Distinct pool values other than the answer, in first-seen order (no set iteration)."""
    return tuple(v for v in dict.fromkeys(pool) if v != answer)


def _nearest(answer: str, pool: Iterable[str], distance: Callable[[str, str], float]) -> tuple[str, ...]:
    """The NEAR_K pool values closest to the answer: distractors a guesser cannot rule out by size."""
    ranked = sorted(_others(answer, pool), key=lambda v: (distance(answer, v), v))
    return tuple(ranked[:NEAR_K])


def _linear(a: str, b: str) -> float:
    return abs(float(a) - float(b))


def _log_ratio(a: str, b: str) -> float:
    return abs(math.log(float(a) / float(b)))


# ---------------------------------------------------------------- domains


def _capitals() -> list[FactQuestion]:
    templates = ("What is the capital of {country}?", "Which city is the capital of {country}?")
    cities = [city for _, city in CAPITALS]
    return [
        FactQuestion(country, _phrase(country, "capital", templates, country=country), city, _others(city, cities))
        for country, city in CAPITALS
    ]


def _chemical_symbols() -> list[FactQuestion]:
    to_symbol = ("What is the chemical symbol for {name}?", "Which symbol stands for the element {name}?")
    to_name = (
        "Which element has the chemical symbol {symbol}?",
        "The chemical symbol {symbol} stands for which element?",
    )
    symbols = [s for _, s, _ in ELEMENTS]
    names = [n for _, _, n in ELEMENTS]
    questions = []
    for _, symbol, name in ELEMENTS:  # both directions share the key, hence the split
        q = _phrase(name, "to_symbol", to_symbol, name=name.lower())
        questions.append(FactQuestion(name, q, symbol, _others(symbol, symbols)))
        q = _phrase(name, "to_name", to_name, symbol=symbol)
        questions.append(FactQuestion(name, q, name, _others(name, names)))
    return questions


def _atomic_numbers() -> list[FactQuestion]:
    to_number = ("What is the atomic number of {name}?", "How many protons are in the nucleus of a {name} atom?")
    to_name = ("Which element has atomic number {z}?", "Which element has {z} protons in its nucleus?")
    numbers_ = [str(z) for z, _, _ in ELEMENTS]
    name_of = {str(z): name for z, _, name in ELEMENTS}
    questions = []
    for z, _, name in ELEMENTS:  # distractors are neighbours in the table, so both ways are hard
        near = _nearest(str(z), numbers_, _linear)
        q = _phrase(name, "to_number", to_number, name=name.lower())
        questions.append(FactQuestion(name, q, str(z), near))
        q = _phrase(name, "to_element", to_name, z=str(z))
        questions.append(FactQuestion(name, q, name, tuple(name_of[n] for n in near)))
    return questions


def _arithmetic_expressions() -> list[tuple[int, str, int]]:
    """ARITHMETIC_N_FACTS distinct (a, op, b), each operand 1 or 2 digits, results >= 0."""
    rng = random.Random(_ARITHMETIC_FACT_SEED)
    found: dict[tuple[int, str, int], None] = {}  # a dict keeps insertion order; a set would not
    while len(found) < ARITHMETIC_N_FACTS:
        a, b = (rng.randint(1, 9) if rng.random() < 0.5 else rng.randint(10, 99) for _ in range(2))
        op = rng.choice("+-×")
        if op == "-" and a < b:
            a, b = b, a  # keep answers non-negative: a minus sign is one more thing to get wrong
        found.setdefault((a, op, b), None)
    return list(found)


def evaluate(a: int, op: str, b: int) -> int:
    """The value of `a op b` for the three operators the arithmetic domain uses."""
    return {"+": a + b, "-": a - b, "×": a * b}[op]


def _near_misses(a: int, op: str, b: int, answer: int) -> tuple[str, ...]:
    """Wrong answers a careless solver gives: off by one or two, a dropped carry (±10),
    swapped last digits, and for products one operand too many or too few times."""
    misses = [answer + d for d in (1, -1, 2, -2, 10, -10)]
    text = str(answer)
    if len(text) >= 2:
        misses.append(int(text[:-2] + text[-1] + text[-2]))
    if op == "×":
        misses += [answer + a, answer - a, answer + b, answer - b]
    return _others(str(answer), (str(m) for m in misses if m >= 0))


def _arithmetic() -> list[FactQuestion]:
    templates = ("What is {expr}?", "Calculate {expr}.", "{expr} = ?")
    questions = []
    for a, op, b in _arithmetic_expressions():
        expr = f"{a} {op} {b}"
        answer = evaluate(a, op, b)
        questions.append(
            FactQuestion(
                expr, _phrase(expr, "arith", templates, expr=expr), str(answer), _near_misses(a, op, b, answer)
            )
        )
    return questions


def _units() -> list[FactQuestion]:
    return _si_unit_questions() + _prefix_questions() + _conversion_questions()


def _si_unit_questions() -> list[FactQuestion]:
    names = [u for u, _, _ in SI_UNITS]
    symbols = [s for _, s, _ in SI_UNITS]
    quantities = [q for _, _, q in SI_UNITS]
    questions = []
    for unit, symbol, quantity in SI_UNITS:  # three questions on one unit share its split
        questions += [
            FactQuestion(unit, f"What is the SI unit of {quantity}?", unit, _others(unit, names)),
            FactQuestion(
                unit, f"Which physical quantity has the SI unit {unit}?", quantity, _others(quantity, quantities)
            ),
            FactQuestion(unit, f"What is the symbol of the SI unit {unit}?", symbol, _others(symbol, symbols)),
        ]
    return questions


def _prefix_questions() -> list[FactQuestion]:
    power = {name: exponent for name, exponent in SI_PREFIXES}
    factors = {name: f"10^{exponent}" for name, exponent in SI_PREFIXES}

    def exponent_gap(x: str, y: str) -> float:  # neighbours in scale are the hard distractors
        return abs(power[x] - power[y])

    questions = []
    for name, factor in factors.items():
        key = f"prefix {name}"
        near_names = _nearest(name, factors, exponent_gap)
        questions += [
            FactQuestion(
                key, f"What factor does the SI prefix {name}- stand for?", factor, tuple(factors[n] for n in near_names)
            ),
            FactQuestion(key, f"Which SI prefix stands for a factor of {factor}?", name, near_names),
        ]
    return questions


def _conversion_questions() -> list[FactQuestion]:
    templates = ("How many {part} are in {whole}?", "How many {part} make up {whole}?")
    values = [v for _, _, v in CONVERSIONS]
    questions = []
    for part, whole, value in CONVERSIONS:
        key = f"{part} in {whole}"
        question = _phrase(key, "convert", templates, part=part, whole=whole)
        questions.append(FactQuestion(key, question, value, _nearest(value, values, _log_ratio)))
    return questions


def _animal_classes() -> list[FactQuestion]:
    templates = ("Which group of animals does the {animal} belong to?", "What kind of animal is the {animal}?")
    groups = [g for _, g in ANIMAL_CLASSES]
    return [
        FactQuestion(animal, _phrase(animal, "animal", templates, animal=animal), group, _others(group, groups))
        for animal, group in ANIMAL_CLASSES
    ]


_BUILDERS: dict[str, Callable[[], list[FactQuestion]]] = {
    "capitals": _capitals,
    "chemical_symbols": _chemical_symbols,
    "atomic_numbers": _atomic_numbers,
    "arithmetic": _arithmetic,
    "units": _units,
    "animal_classes": _animal_classes,
}


# ---------------------------------------------------------------- public API


@lru_cache(maxsize=None)
def domain_questions(domain: str) -> tuple[FactQuestion, ...]:
    """Every question of a domain, all splits, in table order (seed-independent)."""
    if domain not in _BUILDERS:
        raise DataError(f"Unknown built-in dataset {domain!r}; expected one of: {', '.join(DOMAINS)}")
    return tuple(_BUILDERS[domain]())


@lru_cache(maxsize=None)
def _domain_splits(domain: str) -> dict[str, str]:
    return assign_splits(q.key for q in domain_questions(domain))


def _make_item(q: FactQuestion, item_id: str, subject: str, seed: int) -> MCItem:
    # One RNG per item, seeded by its text: adding or removing a fact never reshuffles
    # the other items' choices. A str seed is hashed with SHA-512 by `random`, so it is
    # stable across processes.
    rng = random.Random(f"{seed}/{subject}/{q.question}")
    distractors = rng.sample(q.candidates, N_CHOICES - 1)
    gold = rng.randrange(N_CHOICES)
    choices = distractors[:gold] + [q.answer] + distractors[gold:]
    return MCItem(item_id, q.question, tuple(choices), gold, subject)


def load_builtin(domain: str, split: str, seed: int = 0) -> LoadReport:
    """Generate one split of a built-in domain as a LoadReport named `builtin/<domain>/<split>`.

    Same (domain, split, seed) -> identical items. A different seed gives other
    distractors and gold positions over the same questions (the split is seed-free).
    """
    open_answer = domain.endswith(OPEN_SUFFIX)
    if open_answer:
        domain = domain[: -len(OPEN_SUFFIX)]
    questions = domain_questions(domain)
    if split not in SPLITS:
        raise DataError(
            f"Unknown split {split!r} for built-in dataset {domain!r}; expected one of: {', '.join(SPLITS)}"
        )
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise DataError(f"Expected `seed` to be an int, but got {seed!r}")
    splits = _domain_splits(domain)
    in_split = [q for q in questions if splits[q.key] == split]
    if open_answer:
        items = [
            OpenItem(f"{domain}{OPEN_SUFFIX}-{split}-{i:04d}", q.question, (q.answer,), domain)
            for i, q in enumerate(in_split)
        ]
        return LoadReport(name=f"builtin/{domain}{OPEN_SUFFIX}/{split}", kind="open", items=items)
    items = [_make_item(q, f"{domain}-{split}-{i:04d}", domain, int(seed)) for i, q in enumerate(in_split)]
    return LoadReport(name=f"builtin/{domain}/{split}", kind="mc", items=items)


def split_size(domain: str, split: str) -> int:
    """The number of items `load_builtin(domain, split)` generates, counted from the
    questions' split assignment without making the items (the seed changes no count)."""
    domain = domain.removesuffix(OPEN_SUFFIX)
    if split not in SPLITS:
        raise DataError(f"Unknown split {split!r} of built-in dataset {domain!r}; expected one of: {', '.join(SPLITS)}")
    splits = _domain_splits(domain)
    return sum(1 for q in domain_questions(domain) if splits[q.key] == split)


def builtin_names() -> list[str]:
    """Every built-in dataset name, `builtin/<domain>/<split>` then the `<domain>_open` ones."""
    domains = list(DOMAINS) + [f"{d}{OPEN_SUFFIX}" for d in DOMAINS]
    return [f"builtin/{domain}/{split}" for domain in domains for split in SPLITS]
