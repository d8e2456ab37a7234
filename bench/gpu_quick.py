"""The GPU path in one run: the `quick` CALM preset on the embedded model with QLoRA
(bitsandbytes NF4, bf16 compute) and then with plain LoRA, both under bf16 autocast on
CUDA; per variant the median step time, tokens/s, peak GPU memory and the final
evaluation metrics, as a table and JSON.

    python bench/gpu_quick.py [--steps 40] [--json bench/results/gpu_quick.json]
    python bench/gpu_quick.py --device cpu --steps 2 --no-4bit          # CPU smoke of the script itself
    bash bench/gpu_quick.sh                                              # on a lent GPU machine (docs/gpu.md)

Before any model is loaded it checks what the GPU run needs (CUDA seen by torch; with
4-bit, that bitsandbytes quantizes and multiplies on that device) and exits with a
message naming what is missing, so a lent machine's minutes are not spent on a run
that would fail later. The JSON records the versions (torch, its CUDA, bitsandbytes,
transformers, peft) and the GPU's name, so a figure can be placed.

Measured per variant (`variants` in the JSON; docs/gpu.md explains each field):
- `median_step_s`: the median of the method's own step time (`train/step_time`: no
  logging, no evaluation) over the steps after the first, which carries one-off costs
  (kernel selection, allocator growth).
- `tokens_per_s`: the tokens of those steps' training and S_V batches (every sequence
  the step's forward reads once: prompt + option for cloze scoring, after the context
  cut) divided by those steps' summed step time. A CALM step reads these batches
  several times (T inner steps, the upper level), so this is data throughput, not FLOPs.
- `peak_gpu_mib`: torch's peak allocated (and reserved) CUDA memory from just before the
  model is loaded to the end of the final evaluation; None on the CPU.
- `final`: the evaluation after the last step (`eval/<set>/<metric>` of the trainer) per
  set: accuracy, ECE, AUROC, AURC, mean entropy and confidence of the trained model.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DEFAULT_JSON = ROOT / "bench" / "results" / "gpu_quick.json"
METRICS = ("acc", "ece", "auroc", "aurc", "entropy", "confidence")  # the trainer's eval/<set>/<metric> keys
EXIT_NOT_READY = 3  # the machine lacks what the run needs (CUDA, bitsandbytes' kernels)


class NotReady(RuntimeError):
    """The machine cannot run this benchmark; the message says what is missing."""


@dataclass(frozen=True)
class Variant:
    """One run of the preset: QLoRA (NF4 base weights) or LoRA (base weights in `dtype`)."""

    name: str  # "qlora" | "lora"
    four_bit: bool


@dataclass(frozen=True)
class Settings:
    """What every variant shares; recorded whole in the JSON."""

    model: str
    device: str
    dtype: str  # ModelSpec dtype: auto (bf16 on a bf16 GPU, fp32 on the CPU) | bfloat16 | float32 | float16
    autocast: str  # resolved: bf16 | none
    steps: int
    preset: str = "quick"
    method: str = "calm"
    eval_limit: int | None = None  # None: the preset's
    heldout_limit: int | None = None  # None: the preset's


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="embedded", help="'embedded' or a local model directory")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--steps", type=int, default=40, help="optimizer steps per variant (the quick preset's 40)")
    parser.add_argument("--dtype", default="auto", choices=("auto", "bfloat16", "float32", "float16"))
    parser.add_argument("--autocast", default="auto", choices=("auto", "bf16", "none"),
                        help="auto: bf16 on a CUDA GPU that supports it, none elsewhere")
    parser.add_argument("--no-4bit", action="store_true", help="LoRA only (skip the QLoRA variant)")
    parser.add_argument("--no-lora", action="store_true", help="QLoRA only (skip the LoRA variant)")
    parser.add_argument("--eval-limit", type=int, default=None, help="evaluation / S_V items (default: the preset's)")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    parser.add_argument("--check", action="store_true",
                        help="only check the machine (CUDA, bitsandbytes' kernels) and print the versions as JSON")
    args = parser.parse_args(argv)
    if args.no_4bit and args.no_lora:
        parser.error("--no-4bit and --no-lora leave no variant to run")
    if args.steps < 1:
        parser.error("--steps must be >= 1")
    return args


def variants_for(args: argparse.Namespace) -> list[Variant]:
    """QLoRA first (the GPU path the paper uses), then LoRA, as the flags allow."""
    chosen = [] if args.no_4bit else [Variant("qlora", True)]
    return chosen + ([] if args.no_lora else [Variant("lora", False)])


def check_ready(device: str, need_4bit: bool) -> None:
    """Fail before loading anything when CUDA or bitsandbytes' kernels are missing."""
    import torch

    if device.startswith("cuda"):
        if torch.version.cuda is None:
            raise NotReady(f"torch {torch.__version__} is a CPU build (torch.version.cuda is None): "
                           "install a CUDA build of torch, or run with --device cpu for the smoke test")
        if not torch.cuda.is_available():
            raise NotReady(f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no GPU "
                           "(torch.cuda.is_available() is False): check the driver / CUDA_VISIBLE_DEVICES")
    if need_4bit:
        check_bitsandbytes(device)


def check_bitsandbytes(device: str) -> None:
    """An NF4 round trip and a 4-bit matmul on `device`: importing bitsandbytes succeeds
    even when it found no kernels for this CUDA, so only running them tells."""
    import torch

    try:
        import bitsandbytes as bnb
        import bitsandbytes.functional as bnbf
    except ImportError as exc:
        raise NotReady(f"bitsandbytes is not installed ({exc}); `pip install bitsandbytes` "
                       "or pass --no-4bit to skip the QLoRA variant") from exc
    try:
        weight = torch.randn(128, 64, device=device, dtype=torch.bfloat16)
        packed, state = bnbf.quantize_4bit(weight, quant_type="nf4")
        error = (bnbf.dequantize_4bit(packed, state) - weight).abs().mean().item()
        layer = bnb.nn.Linear4bit(64, 128, bias=False, compute_dtype=torch.bfloat16, quant_type="nf4")
        layer = layer.to(device)
        out = layer(torch.randn(4, 64, device=device, dtype=torch.bfloat16))
        if device.startswith("cuda"):
            torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - a missing .so, an unsupported GPU, a CUDA error: all say "not ready"
        raise NotReady(f"bitsandbytes {getattr(bnb, '__version__', '?')} could not run its 4-bit kernels on "
                       f"{device} (torch CUDA {torch.version.cuda}): {type(exc).__name__}: "
                       f"{str(exc).splitlines()[0][:300] if str(exc) else ''}") from exc
    if not error < 0.2 or tuple(out.shape) != (4, 128) or not bool(torch.isfinite(out).all()):
        raise NotReady(f"bitsandbytes' NF4 kernels on {device} give wrong numbers "
                       f"(round-trip error {error:.3g}, output {tuple(out.shape)})")


def versions(device: str) -> dict[str, Any]:
    """What the figures were measured with: library versions and the accelerator."""
    import importlib.metadata as md

    import torch

    def version(name: str) -> str | None:
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            return None

    record: dict[str, Any] = {
        "python": platform.python_version(), "torch": torch.__version__, "torch_cuda": torch.version.cuda,
        "bitsandbytes": version("bitsandbytes"), "transformers": version("transformers"),
        "peft": version("peft"), "gpu": None, "gpu_capability": None, "gpu_memory_mib": None,
        "cpu": platform.processor() or platform.machine(),
    }
    if device.startswith("cuda") and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(torch.device(device))
        record.update(gpu=props.name, gpu_capability=f"{props.major}.{props.minor}",
                      gpu_memory_mib=round(props.total_memory / 2**20))
    return record


def make_config(settings: Settings, variant: Variant) -> Any:
    """The preset with this variant's quantization; evaluation only after the last step
    (periodic evaluations would be timed into the wall clock) and no checkpoints."""
    from calm_core.training.config import TrainConfig

    overrides: dict[str, Any] = {"method": settings.method, "model": settings.model, "steps": settings.steps,
                                 "load_in_4bit": variant.four_bit, "device": settings.device, "autocast": settings.autocast,
                                 "eval_every": 0, "checkpoint_every": 0}
    if settings.eval_limit is not None:
        overrides.update(eval_limit=settings.eval_limit, heldout_limit=settings.heldout_limit)
    return TrainConfig.preset(settings.preset, **overrides)


def resolved_scoring(cfg: Any, lm: Any) -> Any:
    """`cfg` with `scoring = auto` decided on its S_V as the job decides it
    (training/scoring_choice.py), so the tokens counted are the ones the steps read."""
    from calm_core.training.batches import load_data
    from calm_core.training.scoring_choice import AUTO, resolve_scoring
    from calm_core.training.tasks import get_task

    if cfg.scoring != AUTO:
        return cfg
    resolved, _ = resolve_scoring(cfg, lm, load_data(cfg, get_task(cfg.task).ITEM_KIND).heldout)
    return resolved


def tokens_per_step(cfg: Any, lm: Any) -> list[int]:
    """Tokens of each step's training and S_V batches, as the step's forward reads them
    (the trainer's own data and batch order: `load_data`, `batch_indices`)."""
    from calm_core.scoring.prompts import ScoringConfig
    from calm_core.scoring.truncation import context_limit
    from calm_core.training.batches import batch_indices, load_data
    from calm_core.training.objectives import forward_sequences
    from calm_core.training.tasks import get_task

    data = load_data(cfg, get_task(cfg.task).ITEM_KIND)
    scoring = ScoringConfig(rule=cfg.scoring, chat_template=cfg.chat_template)
    limit = context_limit(lm.model, lm.tokenizer)

    def counts(items: list[Any]) -> list[int]:
        return [sum(len(seq) for seq in seqs) for seqs in forward_sequences(lm.tokenizer, items, scoring, limit)]

    train, heldout = counts(data.train), counts(data.heldout)
    return [sum(train[i] for i in batch_indices(len(train), cfg.batch_size, step, cfg.seed))
            + sum(heldout[i] for i in batch_indices(len(heldout), cfg.heldout_batch_size, step, cfg.seed + 1))
            for step in range(cfg.steps)]


def final_metrics(last: dict[str, Any]) -> dict[str, dict[str, float]]:
    """{set: {metric: value}} from the last step's `eval/<set>/<metric>` record."""
    out: dict[str, dict[str, float]] = {}
    for key, value in last.items():
        parts = key.split("/")
        if parts[0] == "eval" and len(parts) >= 3 and parts[-1] in METRICS:
            out.setdefault("/".join(parts[1:-1]), {})[parts[-1]] = float(value)
    return out


def free_memory(device: str) -> None:
    """Drop the previous variant's model before the next one's peak is measured."""
    import torch

    gc.collect()
    if device.startswith("cuda") and torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def run_variant(settings: Settings, variant: Variant) -> dict[str, Any]:
    """Load the model for this variant, train the preset, and measure (see the module doc)."""
    import torch

    from calm_core.scoring.models import ModelSpec, load_model
    from calm_core.training.loop import train

    cuda = settings.device.startswith("cuda")
    free_memory(settings.device)
    cfg = make_config(settings, variant)
    start = time.perf_counter()
    lm = load_model(ModelSpec(name=settings.model, device=settings.device, dtype=settings.dtype,
                              load_in_4bit=variant.four_bit))
    load_s = time.perf_counter() - start
    cfg = resolved_scoring(cfg, lm)
    tokens = tokens_per_step(cfg, lm)
    times: list[float] = []
    start = time.perf_counter()
    result = train(cfg, lm=lm, progress=lambda step, total, record: times.append(record["train/step_time"]))
    if cuda:
        torch.cuda.synchronize()
    wall = time.perf_counter() - start
    timed = slice(1, None) if len(times) > 1 else slice(None)  # step 1 carries one-off costs
    row = {
        "variant": variant.name, "four_bit": variant.four_bit, "dtype": lm.info.get("dtype"),
        "autocast": settings.autocast, "steps": len(times), "timed_steps": len(times[timed]),
        "load_s": round(load_s, 3), "prefill_s": (result.prefill or {}).get("seconds"),
        "median_step_s": statistics.median(times[timed]), "first_step_s": times[0],
        "tokens_per_step_median": statistics.median(tokens[timed]),
        "tokens_per_s": sum(tokens[timed]) / sum(times[timed]),
        "wall_s": round(wall, 3),
        "peak_gpu_mib": round(torch.cuda.max_memory_allocated() / 2**20, 1) if cuda else None,
        "peak_gpu_reserved_mib": round(torch.cuda.max_memory_reserved() / 2**20, 1) if cuda else None,
        "final": final_metrics(result.last_metrics),
        "quantization": lm.info.get("load_in_4bit"), "n_parameters": lm.info.get("n_parameters"),
    }
    del lm, result
    free_memory(settings.device)
    return row


def fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def table(rows: list[dict[str, Any]]) -> str:
    """Speed per variant, then the final metrics per variant and evaluation set."""
    lines = [f"{'variant':8} {'4bit':>5} {'dtype':>9} {'autocast':>8} {'s/step':>8} {'tok/s':>9} "
             f"{'peak MiB':>9} {'load s':>7} {'wall s':>7}"]
    for r in rows:
        lines.append(f"{r['variant']:8} {str(r['four_bit']):>5} {r['dtype']:>9} {r['autocast']:>8} "
                     f"{r['median_step_s']:8.3f} {r['tokens_per_s']:9.0f} {fmt(r['peak_gpu_mib'], '9.0f'):>9} "
                     f"{r['load_s']:7.1f} {r['wall_s']:7.1f}")
    lines.append("")
    lines.append(f"{'variant':8} {'set':28} " + " ".join(f"{m:>10}" for m in METRICS))
    for r in rows:
        for name, values in r["final"].items():
            lines.append(f"{r['variant']:8} {name:28} " + " ".join(f"{fmt(values.get(m), '10.4f'):>10}" for m in METRICS))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from calm_core.io import atomic_write_json

    args = parse_args(argv)
    chosen = variants_for(args)
    try:
        check_ready(args.device, need_4bit=any(v.four_bit for v in chosen))
    except NotReady as exc:
        print(f"gpu_quick: not ready: {exc}", file=sys.stderr, flush=True)
        return EXIT_NOT_READY
    if args.check:
        print(json.dumps({"ready": True, "device": args.device, "versions": versions(args.device)}, indent=2))
        return 0
    import torch

    from calm_core.training.autocast import resolve_autocast

    settings = Settings(model=args.model, device=args.device, dtype=args.dtype,
                        autocast=resolve_autocast(args.autocast, torch.device(args.device)), steps=args.steps,
                        eval_limit=args.eval_limit, heldout_limit=args.eval_limit)
    record: dict[str, Any] = {
        "benchmark": "gpu_quick", "smoke": not args.device.startswith("cuda"),
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": " ".join(["python", "bench/gpu_quick.py", *(sys.argv[1:] if argv is None else argv)]),
        "settings": asdict(settings), "versions": versions(args.device), "variants": [], "complete": False,
    }
    for variant in chosen:
        print(f"gpu_quick: {variant.name} ({settings.preset} {settings.method}, {settings.steps} steps, "
              f"autocast {settings.autocast}) on {settings.device}...", flush=True)
        record["variants"].append(run_variant(settings, variant))
        record["complete"] = len(record["variants"]) == len(chosen)
        # After each variant: a later one that fails or runs out of the lease keeps this one's figures.
        atomic_write_json(args.json, record)
    print("\n" + table(record["variants"]))  # after the progress bars' last line
    print(json.dumps(record, indent=2))
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
