"""One dataset -> train / held-out / test: S_T, S_V and an evaluation set from one file.

    record = split_dataset("upload/quiz", sizes=(0.6, 0.2, 0.2), seed=0)
    record.names   # {"train": "split/quiz/train", "heldout": "split/quiz/heldout", "test": "split/quiz/test"}

    calm data split upload/quiz --seed 0 --sizes 0.6,0.2,0.2 [--name quiz] [--no-stratify] [--overwrite]

`calm data split` and the Data page refuse a split whose held-out part is under MIN_HELDOUT
items, warn when it cannot choose between methods (CHOOSE_HELDOUT, measured) and a larger
held-out part fits, and say what it supports (calm_core.data.split_sizes).

Stratified by answer position: the items whose gold is option k are spread over the parts
in proportion to the part sizes (each part's count per position is within 1 of its share),
so a file sorted by answer, or one whose answers are mostly "A", gives every part the same
mix. Deterministic: the same items, sizes and seed give the same parts, whatever the order
of the source file. Open-answer sets have no answer position and are split unstratified.

The parts are catalog datasets `split/<name>/<part>` (`workspace/splits/<name>/<part>.jsonl`,
listed by `calm datasets` and every picker); `split.json` beside them records the source,
seed, sizes and the item ids of each part, and a run that trains on a part names it.
"""

from __future__ import annotations

import dataclasses
import json
import random
import shutil
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence, cast

from calm_core.data.catalog import load_dataset
from calm_core.data.entries import (
    BUILTIN_PREFIX,
    HF_PREFIX,
    SPLIT_PARTS,
    SPLIT_PREFIX,
    SPLIT_RECORD,
    UPLOAD_PREFIX,
    split_folder,
)
from calm_core.data.owners import owner_files
from calm_core.data.readers import FORMATS
from calm_core.data.schema import DataError, Item, MCItem
from calm_core.data.split_sizes import part_sizes
from calm_core.io import write_folder_atomically
from calm_core.paths import safe_name

DEFAULT_SIZES = (0.6, 0.2, 0.2)  # train, heldout, test: fractions of the source
RECORD_FORMAT = 1  # bump when split.json changes shape
_UNUSED = "unused"  # items left out when the sizes are counts adding up to less than the source


@dataclass
class SplitPlan:
    """Which items go to which part, before anything is saved (the Data page previews it)."""

    source: str
    kind: str  # "mc" or "open"
    seed: int
    stratify: bool  # as applied: open-answer sets are never stratified
    requested: tuple[float, ...] | tuple[int, ...]  # the sizes as asked for
    parts: dict[str, list[Item]]  # part -> items, in training order (shuffled)
    n_source: int

    @property
    def sizes(self) -> dict[str, int]:
        return {part: len(items) for part, items in self.parts.items()}

    def positions(self) -> dict[str, list[int]]:
        """part -> items per answer position (index 0 = option A); {} for open answers."""
        if self.kind != "mc":
            return {}
        parts = cast(dict[str, list[MCItem]], self.parts)  # kind "mc": every item is an MCItem
        width = 1 + max((item.answer for items in parts.values() for item in items), default=0)
        counts = {part: [0] * width for part in parts}
        for part, items in parts.items():
            for item in items:
                counts[part][item.answer] += 1
        return counts

    def table(self, name: str | None = None) -> list[dict[str, Any]]:
        """Rows for a preview: part, dataset name, items, then items per answer position (A, B, ...)."""
        name = name or default_split_name(self.source)
        positions = self.positions()
        rows = []
        for part, items in self.parts.items():
            row: dict[str, Any] = {"part": part, "dataset": f"{SPLIT_PREFIX}{name}/{part}", "items": len(items)}
            row.update({_letter(k): n for k, n in enumerate(positions.get(part, []))})
            rows.append(row)
        return rows


@dataclass
class SplitRecord:
    """What `split.json` holds: enough to know, and to redo, how every part was made."""

    name: str
    source: str
    kind: str
    seed: int
    stratify: bool
    requested: list[float] | list[int]
    sizes: dict[str, int]
    names: dict[str, str]  # part -> catalog name (split/<name>/<part>)
    ids: dict[str, list[str]]  # part -> item ids, in the part's order
    positions: dict[str, list[int]]  # part -> items per answer position
    n_source: int
    n_unused: int
    created: str = ""
    format: int = RECORD_FORMAT
    path: Path | None = field(default=None, compare=False)  # where split.json is (not saved in it)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data.pop("path")
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any], path: Path | None = None) -> "SplitRecord":
        known = {f.name for f in dataclasses.fields(cls)} - {"path"}
        return cls(**{k: v for k, v in data.items() if k in known}, path=path)

    def same_split(self, other: "SplitRecord") -> bool:
        """The same parts from the same source (the creation time aside)."""
        return dataclasses.replace(self, created="") == dataclasses.replace(other, created="")


# ----------------------------------------------------------------------------- sizes


def parse_sizes(text: str) -> tuple[float, ...] | tuple[int, ...]:
    """ "0.6,0.2,0.2" (fractions adding up to 1) or "300,100,100" (item counts) -> a tuple."""
    wanted = (
        "Expected three sizes train,heldout,test: fractions adding up to 1 (0.6,0.2,0.2) "
        f"or item counts (300,100,100), but got {text!r}"
    )
    parts = [p.strip() for p in str(text).split(",")]
    if len(parts) != len(SPLIT_PARTS):
        raise DataError(wanted)
    try:
        if all(p.isascii() and p.isdigit() for p in parts):
            return tuple(int(p) for p in parts)
        return tuple(float(p) for p in parts)
    except ValueError:
        raise DataError(wanted) from None


def _allocate(strata: list[int], targets: list[int]) -> list[list[int]]:
    """counts[s][p]: how many items of stratum s go to part p.

    Each row adds up to its stratum's size, each column to its part's size (both add up
    to the same total), and every count is the floor or the ceiling of its share
    strata[s] * targets[p] / total. After the floors, one more item goes to some of the
    cells whose share has a fractional part: a flow problem (strata -> cells -> parts)
    whose fractional parts are a solution, so a 0/1 one exists; augmenting paths find it.
    """
    total = sum(strata)
    counts = [[size * t // total for t in targets] for size in strata]  # exact integer floors
    fraction = [[size * t % total for t in targets] for size in strata]  # (share - floor) * total
    room = [t - sum(row[p] for row in counts) for p, t in enumerate(targets)]
    flow = _Flow(fraction, room, {p: set() for p in range(len(targets))})  # part -> strata given one more
    for s, row in enumerate(counts):
        for _ in range(strata[s] - sum(row)):
            if not flow.augment(s, set()):  # cannot happen: the fractional parts are a solution
                raise AssertionError(f"no allocation for strata {strata} and parts {targets}")
    for p, given in flow.extra.items():
        for s in given:
            counts[s][p] += 1
    return counts


@dataclass
class _Flow:
    """_allocate's augmenting paths: `extra[p]`, the strata that give part p one item more
    than their floor, within `room[p]`, only where `fraction[s][p]` says the share allows."""

    fraction: list[list[int]]
    room: list[int]
    extra: dict[int, set[int]]

    def augment(self, s: int, seen: set[int]) -> bool:
        """Give stratum s one more item somewhere, moving other strata's extras if needed."""
        for p in sorted(range(len(self.room)), key=lambda p: (-self.fraction[s][p], p)):
            if self.fraction[s][p] == 0 or s in self.extra[p] or p in seen:
                continue
            seen.add(p)
            if len(self.extra[p]) < self.room[p] or self._free_one(p, seen):
                self.extra[p].add(s)
                return True
        return False

    def _free_one(self, p: int, seen: set[int]) -> bool:
        """Part p is full: move one stratum's extra item from p to another part."""
        for other in sorted(self.extra[p]):
            if self.augment(other, seen):
                self.extra[p].discard(other)
                return True
        return False


# ----------------------------------------------------------------------------- planning + saving


def plan_split(
    items: Sequence[Item],
    sizes: Sequence[float] | Sequence[int] = DEFAULT_SIZES,
    seed: int = 0,
    stratify: bool = True,
    source: str = "",
) -> SplitPlan:
    """Assign `items` to train / heldout / test (no item in two parts), stratified by answer
    position when `stratify` and the items are multiple choice. Pure: nothing is saved."""
    if not items:
        raise DataError(f"Expected items to split in {source or 'the dataset'}, but it has none")
    if len({item.id for item in items}) != len(items):
        raise DataError(f"Expected unique item ids in {source or 'the dataset'} to record each part by id")
    kind = "mc" if isinstance(items[0], MCItem) else "open"
    stratify = stratify and kind == "mc"
    counts = list(part_sizes(len(items), sizes))
    names = list(SPLIT_PARTS) + ([_UNUSED] if sum(counts) < len(items) else [])
    counts += [len(items) - sum(counts)] if len(names) > len(SPLIT_PARTS) else []
    rng = random.Random(seed)
    strata: dict[int, list[Item]] = {}
    for item in sorted(items, key=lambda it: it.id):  # the source's order does not matter
        strata.setdefault(item.answer if stratify else 0, []).append(item)  # type: ignore[union-attr]
    keys = sorted(strata)
    for key in keys:
        rng.shuffle(strata[key])
    allocation = _allocate([len(strata[k]) for k in keys], counts)
    parts: dict[str, list[Item]] = {name: [] for name in names}
    for key, row in zip(keys, allocation, strict=True):
        start = 0
        for name, count in zip(names, row, strict=True):
            parts[name].extend(strata[key][start : start + count])
            start += count
    for name in names:
        rng.shuffle(parts[name])  # not grouped by answer: a `limit` takes a fair sample
    parts.pop(_UNUSED, None)
    return SplitPlan(source, kind, seed, stratify, tuple(sizes), parts, len(items))


def save_split(
    plan: SplitPlan, name: str | None = None, overwrite: bool = False, owner: str | None = None
) -> SplitRecord:
    """Save the parts as `split/<name>/<part>` with their split.json (+ owner.json with
    `owner`, the saving studio session's tag: data/owners.py), atomically.

    The same split saved again is a no-op (the record is returned); a different split
    under an existing name needs `overwrite`.
    """
    clean, folder = split_folder(name or default_split_name(plan.source))
    record = _record(plan, clean)
    try:
        existing = read_split(clean) if (folder / SPLIT_RECORD).is_file() else None
    except DataError:  # an unreadable record: only `overwrite` replaces it
        existing = None
    if existing is not None and existing.same_split(record):
        return existing
    if (existing is not None or folder.exists()) and not overwrite:
        held = f" (of {existing.source}, seed {existing.seed}, sizes {existing.sizes})" if existing else ""
        raise DataError(
            f"Expected a new split name, but {SPLIT_PREFIX}{clean} already holds another split{held}: "
            "choose another name, or replace it (--overwrite; on the Data page, tick Replace)"
        )
    files = {f"{part}.jsonl": items for part, items in plan.parts.items()}
    write_folder_atomically(folder, files, {SPLIT_RECORD: record.to_dict(), **owner_files(owner)})
    return dataclasses.replace(record, path=folder / SPLIT_RECORD)


def split_dataset(
    name: str,
    sizes: Sequence[float] | Sequence[int] = DEFAULT_SIZES,
    seed: int = 0,
    stratify: bool = True,
    out: str | None = None,
    overwrite: bool = False,
    mapping: Any = None,
) -> SplitRecord:
    """Load any catalog dataset (or file), split it and save the parts; see `plan_split`."""
    report = load_dataset(name, mapping=mapping)
    return save_split(plan_split(report.items, sizes, seed, stratify, source=name.strip()), out, overwrite)


def _record(plan: SplitPlan, clean: str) -> SplitRecord:
    return SplitRecord(
        name=clean,
        source=plan.source,
        kind=plan.kind,
        seed=plan.seed,
        stratify=plan.stratify,
        requested=list(plan.requested),
        sizes=plan.sizes,
        names={part: f"{SPLIT_PREFIX}{clean}/{part}" for part in plan.parts},
        ids={part: [item.id for item in items] for part, items in plan.parts.items()},
        positions=plan.positions(),
        n_source=plan.n_source,
        n_unused=plan.n_source - sum(plan.sizes.values()),
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )


def read_split(name: str) -> SplitRecord:
    """The record of a split, named `quiz`, `split/quiz` or by one of its parts `split/quiz/train`."""
    bare = name.strip().removeprefix(SPLIT_PREFIX)
    bare = bare.rpartition("/")[0] if bare.rpartition("/")[2] in SPLIT_PARTS and "/" in bare else bare
    clean, folder = split_folder(bare)
    path = folder / SPLIT_RECORD
    try:
        return SplitRecord.from_dict(json.loads(path.read_text(encoding="utf-8")), path)
    except FileNotFoundError:
        raise DataError(f"Expected a split named {clean!r}, but there is none in {folder.parent}") from None
    except (OSError, ValueError, TypeError) as exc:
        raise DataError(
            f"Expected a readable {SPLIT_RECORD} for split {clean!r}, but could not read it: {exc}"
        ) from None


def split_record_of(dataset: str) -> SplitRecord | None:
    """The split a dataset name is a part of (`split/<name>/<part>`, a slice allowed), else None.
    For run provenance: a run that trains on a part can record where it came from."""
    base = dataset.strip().split("[")[0]
    if not base.startswith(SPLIT_PREFIX):
        return None
    try:
        return read_split(base)
    except DataError:
        return None


def delete_split(name: str) -> None:
    """Remove a split and its parts; DataError when there is none."""
    record = read_split(name)
    shutil.rmtree(split_folder(record.name)[1])


def default_split_name(source: str) -> str:
    """A split name from its source: upload/quiz -> quiz, builtin/capitals/train -> capitals-train."""
    base = source.strip()
    for prefix in (UPLOAD_PREFIX, SPLIT_PREFIX, BUILTIN_PREFIX, HF_PREFIX):
        base = base.removeprefix(prefix)
    if Path(base).suffix.lower() in FORMATS:
        base = Path(base).stem
    try:
        return safe_name(base.replace("/", "-").replace(":", "-"))
    except ValueError:
        return "split"


def _letter(position: int) -> str:
    return chr(ord("A") + position) if position < 26 else str(position)
