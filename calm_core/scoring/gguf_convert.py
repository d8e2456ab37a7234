"""Convert a GGUF once into a safetensors directory: the fast way, and transformers' own.

    convert_gguf(Path("model.gguf"), target, label="...", step=print_step)  # ~30 s for Gemma 3 270M
    convert_gguf_plain(Path("model.gguf"), target, label="...")             # the reference, ~2.5 min

Both de-quantize every tensor with transformers' GGUF loader, rebuild the model from its
config (a model loaded from a GGUF refuses `save_pretrained`) and save it with the
tokenizer and a marker (`calm_conversion.json`), atomically (temp dir + rename).

Why two: the plain way calls `from_pretrained` three times on the GGUF (model, tokenizer,
config), and for an architecture outside transformers' fast metadata table (Gemma 3,
Llama) each call reads the config through the `gguf` package's GGUFReader, which builds
a numpy view per element of every metadata array (gguf_file.py): four reads of a
262,144-token vocabulary, ~27 s each on 2 cores, most of the conversion. The fast way
gives the config and the weights a copy of the GGUF without the vocabulary (its size
written as `<arch>.vocab_size`, which transformers reads first), builds the tokenizer
once from the original by its model type (no config read where transformers registers
a tokenizer for it, as for Gemma 3), and skips the random
initialisation of the rebuilt model that the loaded weights overwrite. tests/
test_gguf_convert.py holds it to the plain way: the same config, tensors and tokenizer.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

from calm_core.scoring.gguf_file import VOCABULARY_KEYS, read_layout, write_without

CONVERSION_MARKER = "calm_conversion.json"
StepFn = Callable[[int, int, str], None]  # (step, steps, what it does now): the CLI prints it, the studio shows it
STEPS = 4


def print_step(step: int, steps: int, what: str) -> None:
    """The default progress of a conversion: one line per step on stderr."""
    print(f"calm: converting [{step}/{steps}] {what}", file=sys.stderr, flush=True)


def quiet_step(step: int, steps: int, what: str) -> None:
    """No progress (tests, benches)."""


@contextmanager
def staging_dir(target: Path) -> Iterator[Path]:
    """A temp directory beside `target` that becomes `target` when the block succeeds."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".convert-", dir=target.parent))
    try:
        yield staging
        if target.exists():
            shutil.rmtree(target)
        os.replace(staging, target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def convert_gguf(
    gguf: Path, target: Path, label: str, step: StepFn = print_step, extra: dict[str, Any] | None = None
) -> None:
    """De-quantize `gguf` into a safetensors directory at `target`, showing each step."""
    started = time.perf_counter()
    with staging_dir(target) as staging:
        step(1, STEPS, f"reading {gguf.name}'s layout; a copy without its vocabulary for the weights")
        light = staging / ".weights.gguf"
        layout = write_without(gguf, light, VOCABULARY_KEYS, _vocab_size_entry(gguf))
        step(2, STEPS, f"de-quantizing {layout.tensor_count} tensors")
        model, config = _weights(light)
        light.unlink()
        step(3, STEPS, f"building the tokenizer ({layout.array_lengths.get('tokenizer.ggml.tokens', 0)} entries)")
        tokenizer = _tokenizer(gguf, config.model_type)
        step(4, STEPS, f"saving to {target}")
        _save(model, tokenizer, staging, _marker(gguf, label, extra, time.perf_counter() - started))


def _vocab_size_entry(gguf: Path) -> dict[str, int]:
    """`{"<arch>.vocab_size": n}`: the vocabulary's size, which transformers otherwise
    takes from the token list the light copy leaves out."""
    layout = read_layout(gguf)
    tokens = layout.array_lengths.get("tokenizer.ggml.tokens")
    return {f"{layout.values['general.architecture']}.vocab_size": tokens} if tokens else {}


def _weights(light: Path) -> tuple[Any, Any]:
    """(the rebuilt fp32 model holding the de-quantized weights, its config)."""
    from transformers import AutoModelForCausalLM

    source = AutoModelForCausalLM.from_pretrained(str(light.parent), gguf_file=light.name, dtype=torch.float32)
    config = source.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # the copy is plain fp32; a GGUF marker would confuse loaders
    with _no_init():
        fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    fresh.tie_weights()  # init_weights ties them, and no_init_weights skips it
    fresh.load_state_dict(source.state_dict())
    return fresh, config


def _no_init() -> Any:
    """Skip the random initialisation of a model whose every weight is loaded next
    (~6 s for Gemma 3 270M); a plain context where transformers lacks it."""
    try:
        from transformers.initialization import no_init_weights
    except ImportError:
        return nullcontext()
    return no_init_weights()


def _tokenizer(gguf: Path, model_type: str) -> Any:
    """The tokenizer from the original GGUF. Where transformers registers a tokenizer for
    the model type (Gemma 3: GemmaTokenizer), that class builds it straight from the file;
    AutoTokenizer would first read the whole config again through GGUFReader to find the
    same class. Elsewhere (Llama: no registered class) AutoTokenizer picks it as before."""
    from transformers import AutoTokenizer
    from transformers.models.auto.tokenization_auto import TOKENIZER_MAPPING_NAMES

    registered = {"tokenizer_type": model_type} if TOKENIZER_MAPPING_NAMES.get(model_type) else {}
    return AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name, **registered)


def _marker(gguf: Path, label: str, extra: dict[str, Any] | None, seconds: float) -> dict[str, Any]:
    marker = {"source": str(gguf), "source_bytes": gguf.stat().st_size, "label": label}
    return {**marker, **(extra or {}), "seconds": round(seconds, 1)}


def _save(model: Any, tokenizer: Any, staging: Path, marker: dict[str, Any]) -> None:
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    (staging / CONVERSION_MARKER).write_text(json.dumps(marker, indent=2))


def convert_gguf_plain(gguf: Path, target: Path, label: str) -> None:
    """The reference: transformers' own readers, as CALM Studio converted before
    (bench/convert_gguf.py times both; tests hold the fast way to this one)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    started = time.perf_counter()
    source = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    config = AutoConfig.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    fresh.load_state_dict(source.state_dict())
    with staging_dir(target) as staging:
        _save(fresh, tokenizer, staging, _marker(gguf, label, None, time.perf_counter() - started))
