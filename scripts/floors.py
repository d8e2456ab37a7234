"""Write the constraints file of pyproject.toml's version floors: `name==floor` for every
`name>=floor` in [project.dependencies] and the named extras (default: hf,studio,dev, what
scripts/setup.sh installs). One source of truth: the floors live in pyproject.toml only.

torch is left out: scripts/test_floors.sh pins it as scripts/setup.sh does
(CALM_TORCH_VERSION, default 2.13.0, the CPU build on this machine's disk), so its floor
is not what gets tested.

    python3 scripts/floors.py [--extras hf,studio,dev] [--output FILE]
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOT_CONSTRAINED = {"torch"}  # pinned by the caller, as scripts/setup.sh pins it
_SPEC = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*(?P<rest>[^;]*)(;.*)?$")


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def floors(pyproject: Path, extras: list[str]) -> list[str]:
    """`name==floor` lines, in pyproject.toml's order; a spec without `>=` is an error."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    optional = project.get("optional-dependencies", {})
    unknown = [e for e in extras if e not in optional]
    if unknown:
        raise SystemExit(f"floors: no such extra in {pyproject.name}: {', '.join(unknown)}")
    specs = list(project["dependencies"]) + [s for e in extras for s in optional[e]]
    lines, seen = [], set()
    for spec in specs:
        m = _SPEC.match(spec)
        if not m:
            raise SystemExit(f"floors: cannot read the requirement {spec!r}")
        name = _normal(m.group(1))
        if name in NOT_CONSTRAINED or name in seen:
            continue
        low = [c.strip()[2:].strip() for c in m.group("rest").split(",") if c.strip().startswith(">=")]
        if not low:
            raise SystemExit(f"floors: {spec!r} has no `>=` floor; every dependency declares one")
        seen.add(name)
        lines.append(f"{name}=={low[0]}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extras", default="hf,studio,dev", help="comma-separated extras (default: hf,studio,dev)")
    parser.add_argument("--output", "-o", help="write here instead of stdout")
    parser.add_argument("--pyproject", default=str(ROOT / "pyproject.toml"))
    args = parser.parse_args(argv)
    extras = [e.strip() for e in args.extras.split(",") if e.strip()]
    text = "".join(line + "\n" for line in floors(Path(args.pyproject), extras))
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
