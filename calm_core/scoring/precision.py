"""The model body's precision, a measured choice: bf16 where the hardware has it and the
model's answers survive it, fp32 otherwise; the LM head's logits always in fp32.

    choice = choice_from_gap("auto", torch.bfloat16, probe_gap(fp32_probe, bf16_probe), cpu_bf16_flags())
    choice.dtype, choice.reason, choice.probe     # recorded with every result (lm.info)

On a CPU with avx512_bf16 or AMX, bf16 matmuls run about twice as fast as fp32 and the
weights take half the memory. bf16 keeps 8 bits of mantissa, so a model's log-probabilities
move; whether its answers do is a property of the model, not of the dtype. So bf16 becomes
a model's default only where bench/precision.py has shown the same answers on the built-in
sets and ARC-Easy (`NamedModel.cpu_bf16`), and each load re-checks it on a short probe
(`agrees`): the same top token and a bounded log-probability gap on the probe prompts. The
fp32 probe result is kept per weights (`reference_file`), so only a model's first load
needs its fp32 copy; later loads start in bf16. A model that fails the probe is reloaded
in fp32, with the figures that refused it recorded.

The LM head is replaced by `Float32Head`: its weight held in fp32, fed the hidden state cast
to fp32, so the head's matmul, the logits, the log-softmax and every calibration figure are
fp32 whatever the body runs in (the head is a few percent of a forward's FLOPs).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from calm_core.paths import cache_dir

CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # /proc/cpuinfo flags of native bf16 matmuls
PROBE_TOP_K = 10  # the gap is measured on fp32's 10 likeliest next tokens: the rest of a vocabulary is noise
MAX_PROBE_GAP = 0.25  # nats: larger than bf16 rounding moves a calibrated probability by ~25% relative
PROBE_PROMPTS = (  # short, letter-answer shaped, and in no dataset the studio evaluates on
    "Question: Which planet is closest to the Sun?\nA. Venus\nB. Mercury\nC. Mars\nD. Earth\nAnswer:",
    "Question: How many legs does a spider have?\nA. six\nB. ten\nC. eight\nD. four\nAnswer:",
    "Question: What colour do you get by mixing blue and yellow?\nA. green\nB. purple\nC. orange\nAnswer:",
    "The boiling point of water at sea level, in degrees Celsius, is",
)


@dataclass(frozen=True)
class ProbeGap:
    """How bf16 moved the probe: the same top token on every prompt, and the largest
    log-probability change among fp32's top tokens."""

    same_top_token: bool
    max_logprob_gap: float
    prompts: int

    @property
    def agrees(self) -> bool:
        return self.same_top_token and self.max_logprob_gap <= MAX_PROBE_GAP


@dataclass(frozen=True)
class PrecisionChoice:
    """The dtype of the model's body, why, and the probe that decided it (None: not probed)."""

    dtype: str  # "float32" | "bfloat16" | "float16"
    reason: str
    probe: ProbeGap | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def cpu_bf16_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> tuple[str, ...]:
    """The native-bf16 flags this CPU reports (empty where it has none or cannot be read)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return ()
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return tuple(flag for flag in CPU_BF16_FLAGS if flag in flags)


class Float32Head(nn.Module):
    """An LM head that computes in fp32 beside a lower-precision body: an fp32 copy of the
    weight (and bias), the hidden state cast up. Holds a Parameter, not an nn.Linear, so
    LoRA's target discovery never wraps it."""

    def __init__(self, head: nn.Module, tied: bool = False) -> None:
        super().__init__()
        self.tied = tied  # a copy of the input embeddings: not a parameter of its own (parameter_count)
        weight = torch.as_tensor(head.weight).detach().to(torch.float32).clone()
        bias = getattr(head, "bias", None)
        self.weight = nn.Parameter(weight, requires_grad=False)  # (V, H)
        self.bias = None if bias is None else nn.Parameter(bias.detach().float().clone(), requires_grad=False)
        self.in_features, self.out_features = weight.shape[1], weight.shape[0]

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return nn.functional.linear(hidden.float(), self.weight, self.bias)  # (..., H) -> (..., V) in fp32


def use_float32_head(model: Any) -> None:
    """Put a Float32Head where the model's output embeddings are (untying them from the
    input embeddings, which stay in the body's dtype)."""
    head = model.get_output_embeddings()
    if isinstance(head, Float32Head):
        return
    tied = head.weight is model.get_input_embeddings().weight
    model.set_output_embeddings(Float32Head(head, tied))
    model.config.tie_word_embeddings = False  # a later tie_weights() must not put the bf16 matrix back
    if hasattr(model.config, "get_text_config"):
        model.config.get_text_config().tie_word_embeddings = False


def parameter_count(model: Any) -> int:
    """The model's parameters, a Float32Head copied from tied embeddings not counted twice."""
    copies = sum(p.numel() for m in model.modules() if isinstance(m, Float32Head) and m.tied for p in m.parameters())
    return int(sum(p.numel() for p in model.parameters())) - int(copies)


@torch.no_grad()
def probe_logprobs(model: Any, tokenizer: Any) -> torch.Tensor:
    """Next-token log-probabilities (P, V) in fp32 after each probe prompt, run one at a time
    (no padding, so nothing but the dtype differs between two calls)."""
    device = next(model.parameters()).device
    rows = []
    for prompt in PROBE_PROMPTS:
        ids = tokenizer(prompt, return_tensors="pt").input_ids.to(device)
        logits = model(input_ids=ids, use_cache=False).logits[0, -1].float()  # (V,)
        rows.append(torch.log_softmax(logits, dim=-1))
    return torch.stack(rows)


def probe_gap(reference: torch.Tensor, candidate: torch.Tensor, top_k: int = PROBE_TOP_K) -> ProbeGap:
    """Compare two probe results (P, V): the same argmax per prompt, and the largest
    |log p| change over the reference's top-k tokens of each prompt."""
    top = reference.topk(top_k, dim=-1).indices  # (P, k)
    gap = (reference.gather(-1, top) - candidate.gather(-1, top)).abs().max()
    same = bool((reference.argmax(-1) == candidate.argmax(-1)).all())
    return ProbeGap(same_top_token=same, max_logprob_gap=float(gap), prompts=reference.shape[0])


def cast_body(model: Any, dtype: torch.dtype) -> None:
    """The body in `dtype`, its head computing in fp32 (from the weight as the body holds it,
    so a load that starts in `dtype` gives the same logits as one cast to it). Parameters only:
    buffers such as the rotary embedding's inverse frequencies stay fp32, as a load in
    `dtype` keeps them (`model.to` would round them and move every position's angle)."""
    for param in model.parameters():
        param.data = param.data.to(dtype)
    model.config.dtype = dtype  # what a load in `dtype` records: the attention masks are built from it
    use_float32_head(model)


def wanted_cpu_dtype(wanted: str, named_ok: bool | None, flags: tuple[str, ...]) -> PrecisionChoice | None:
    """What `wanted` means on this CPU before any probe: a PrecisionChoice when it is settled
    without one (fp32), None when bf16 is to be tried and checked on the probe."""
    if wanted == "float32":
        return PrecisionChoice("float32", "asked for (--dtype float32)")
    if wanted in ("bfloat16", "float16"):
        return None
    if not flags:
        return PrecisionChoice("float32", "auto: this CPU has no native bf16 (avx512_bf16 / AMX); fp32 is faster")
    if named_ok is None:
        return PrecisionChoice(
            "float32", "auto: bf16 is the default only for a model bench/precision.py measured (--dtype bfloat16)"
        )
    if not named_ok:
        return PrecisionChoice("float32", "auto: bench/precision.py found bf16 changes this model's answers")
    return None


def low_dtype(wanted: str) -> torch.dtype:
    """The lower precision a probed load tries: fp16 when asked for, else bf16."""
    return torch.float16 if wanted == "float16" else torch.bfloat16


def reference_file(fingerprint: str) -> Path:
    """Where a model's fp32 probe result is kept: it depends on the weights alone, so a later
    load can go straight to bf16 (half the memory, no fp32 copy) and still be checked."""
    return cache_dir() / "precision" / f"{fingerprint.replace(':', '-')}.safetensors"


def stored_reference(fingerprint: str | None) -> torch.Tensor | None:
    """The fp32 probe result stored for these weights (None: not yet, or unreadable)."""
    if fingerprint is None or not reference_file(fingerprint).is_file():
        return None
    from safetensors.torch import load_file

    try:
        reference = load_file(str(reference_file(fingerprint)))["logprobs"]
    except (OSError, KeyError, ValueError):
        return None
    return reference if reference.shape[0] == len(PROBE_PROMPTS) else None


def store_reference(fingerprint: str | None, reference: torch.Tensor) -> None:
    """Keep the fp32 probe result for these weights (nothing for a model without a fingerprint)."""
    if fingerprint is None:
        return
    from safetensors.torch import save_file

    path = reference_file(fingerprint)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    save_file({"logprobs": reference.contiguous()}, str(tmp))
    tmp.replace(path)


def choice_from_gap(wanted: str, dtype: torch.dtype, gap: ProbeGap, flags: tuple[str, ...]) -> PrecisionChoice:
    """The precision a probed load ends with: a forced dtype stays whatever the probe says
    (its gap is recorded); an automatic one that fails the probe is fp32 (the caller reloads)."""
    name = str(dtype).removeprefix("torch.")
    how = f"same top token on {gap.prompts} probe prompts: {gap.same_top_token}, largest gap {gap.max_logprob_gap:.3f}"
    if wanted != "auto":
        return PrecisionChoice(name, f"asked for (--dtype {name}); {how}", gap)
    if gap.agrees:
        cpu = "/".join(flags)
        return PrecisionChoice(name, f"auto: native bf16 ({cpu}), answers kept on the probe ({how})", gap)
    return PrecisionChoice("float32", f"auto: bf16 moved the probe too far ({how}; bound {MAX_PROBE_GAP})", gap)
