"""The model body's precision (scoring/precision.py): the CPU's bf16 flags read from
cpuinfo, the probe's gap measured on fp32's top tokens, the LM head kept in fp32 beside a
bf16 body, and the choice `auto` makes (fp32 unless a bench verdict allows bf16 and the
load's own probe agrees), recorded in the loaded model's info."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from calm_core.scoring import precision
from calm_core.scoring.models import ModelSpec, load_model
from calm_core.scoring.precision import (
    Float32Head,
    PrecisionChoice,
    ProbeGap,
    cpu_bf16_flags,
    probe_gap,
    wanted_cpu_dtype,
)


def test_cpu_flags_are_read_from_cpuinfo(tmp_path: Path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text("processor : 0\nflags : fpu sse avx512f avx512_bf16 amx_tile\n")
    assert cpu_bf16_flags(info) == ("avx512_bf16",)
    info.write_text("processor : 0\nflags : fpu sse avx2\n")
    assert cpu_bf16_flags(info) == ()
    assert cpu_bf16_flags(tmp_path / "missing") == ()


def test_probe_gap_reads_the_reference_top_tokens_only() -> None:
    ref = torch.log_softmax(torch.tensor([[4.0, 3.0, 0.0, -9.0]]), dim=-1)
    moved_tail = ref.clone()
    moved_tail[0, 3] += 5.0  # far below the top 2: not counted
    gap = probe_gap(ref, moved_tail, top_k=2)
    assert gap.same_top_token and gap.max_logprob_gap == 0.0
    swapped = ref[:, [1, 0, 2, 3]]
    gap = probe_gap(ref, swapped, top_k=2)
    assert not gap.same_top_token and gap.max_logprob_gap == pytest.approx(1.0, abs=1e-6)
    assert not gap.agrees


def test_auto_on_a_cpu_without_bf16_or_an_unmeasured_model_is_fp32() -> None:
    assert wanted_cpu_dtype("auto", True, ()).dtype == "float32"  # no native bf16
    unmeasured = wanted_cpu_dtype("auto", None, ("avx512_bf16",))
    assert unmeasured.dtype == "float32" and "bench/precision.py" in unmeasured.reason
    refused = wanted_cpu_dtype("auto", False, ("avx512_bf16",))
    assert refused.dtype == "float32" and "changes this model's answers" in refused.reason
    assert wanted_cpu_dtype("auto", True, ("avx512_bf16",)) is None  # to be probed
    assert wanted_cpu_dtype("bfloat16", None, ()) is None  # asked for: probed, and kept
    assert wanted_cpu_dtype("float32", True, ("amx_bf16",)).dtype == "float32"


def test_the_head_computes_in_fp32_beside_a_bf16_body() -> None:
    linear = torch.nn.Linear(8, 5, bias=False)
    head = Float32Head(linear.to(torch.bfloat16))
    out = head(torch.randn(2, 8, dtype=torch.bfloat16))
    assert out.dtype == torch.float32 and out.shape == (2, 5)
    assert not any(isinstance(m, torch.nn.Linear) for m in head.modules())  # LoRA never targets it


def test_a_forced_bf16_load_keeps_the_head_fp32_and_records_the_probe(tiny_model_dir: Path) -> None:
    lm = load_model(ModelSpec(name=str(tiny_model_dir), device="cpu", dtype="bfloat16"))
    assert lm.info["dtype"] == "bfloat16"
    assert lm.model.model.layers[0].self_attn.q_proj.weight.dtype == torch.bfloat16
    assert isinstance(lm.model.get_output_embeddings(), Float32Head)
    assert lm.model.model.embed_tokens.weight.dtype == torch.bfloat16  # untied: the input side stays bf16
    ids = lm.tokenizer("Question: x\nAnswer:", return_tensors="pt").input_ids
    assert lm.model(input_ids=ids).logits.dtype == torch.float32
    probe = lm.info["precision"]["probe"]
    assert probe["prompts"] == len(precision.PROBE_PROMPTS) and probe["max_logprob_gap"] >= 0.0
    assert "asked for" in lm.info["precision"]["reason"]


def test_auto_loads_an_unnamed_model_in_fp32_and_says_why(tiny_model_dir: Path) -> None:
    lm = load_model(ModelSpec(name=str(tiny_model_dir), device="cpu"))
    assert lm.info["dtype"] == "float32" and lm.model.dtype == torch.float32
    assert not isinstance(lm.model.get_output_embeddings(), Float32Head)
    assert lm.info["precision"]["reason"].startswith("auto:")


def test_auto_that_fails_the_probe_reloads_fp32(tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from calm_core.scoring import models

    monkeypatch.setattr(models, "cpu_bf16_flags", lambda *a: ("avx512_bf16",))
    monkeypatch.setattr(models, "_named_cpu_bf16", lambda name: True)  # as if the bench had allowed it
    monkeypatch.setattr(models, "probe_gap", lambda a, b, top_k=10: ProbeGap(False, 3.0, 4))
    lm = load_model(ModelSpec(name=str(tiny_model_dir), device="cpu"))
    assert lm.info["dtype"] == "float32" and lm.model.model.layers[0].mlp.up_proj.weight.dtype == torch.float32
    assert "moved the probe too far" in lm.info["precision"]["reason"]
    monkeypatch.setattr(models, "probe_gap", lambda a, b, top_k=10: ProbeGap(True, 0.01, 4))
    lm = load_model(ModelSpec(name=str(tiny_model_dir), device="cpu"))
    assert lm.info["dtype"] == "bfloat16" and "answers kept on the probe" in lm.info["precision"]["reason"]


def test_choice_round_trips_as_json() -> None:
    choice = PrecisionChoice("bfloat16", "why", ProbeGap(True, 0.1, 4))
    assert choice.to_dict()["probe"] == {"same_top_token": True, "max_logprob_gap": 0.1, "prompts": 4}


def test_the_fp32_reference_is_kept_and_a_later_load_starts_in_bf16(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from calm_core.scoring import models

    monkeypatch.setenv("CALM_CACHE_DIR", str(tmp_path / "cache"))
    first = load_model(ModelSpec(name=str(tiny_model_dir), device="cpu", dtype="bfloat16"))
    assert precision.reference_file(first.info["fingerprint"]).is_file()
    asked: list[torch.dtype] = []
    real = models._from_pretrained
    monkeypatch.setattr(models, "_from_pretrained", lambda *a, **k: asked.append(a[2]) or real(*a, **k))
    second = load_model(ModelSpec(name=str(tiny_model_dir), device="cpu", dtype="bfloat16"))
    assert asked == [torch.bfloat16]  # no fp32 copy this time
    assert second.info["precision"] == first.info["precision"]  # the same probe gap, so the same model
    ids = first.tokenizer("Question: y\nAnswer:", return_tensors="pt").input_ids
    assert torch.equal(first.model(input_ids=ids).logits, second.model(input_ids=ids).logits)
    from calm_core.scoring.forward import left_pad_batch

    seqs = [first.tokenizer(t).input_ids for t in ("Question: a much longer question here\nAnswer:", "Q: y\nA:")]
    batch = left_pad_batch(seqs, first.tokenizer.pad_token_id, torch.device("cpu"))  # padding: the mask matters
    assert torch.equal(first.model(**batch).logits, second.model(**batch).logits)
    assert second.info["n_parameters"] == first.info["n_parameters"]


def test_a_tied_heads_copy_is_not_counted_twice(tiny_model_dir: Path) -> None:
    fp32 = load_model(ModelSpec(name=str(tiny_model_dir), device="cpu", dtype="float32"))
    bf16 = load_model(ModelSpec(name=str(tiny_model_dir), device="cpu", dtype="bfloat16"))
    assert bf16.info["n_parameters"] == fp32.info["n_parameters"]
