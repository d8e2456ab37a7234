"""`calm export RUN DIR --merged`: a plain transformers folder that vLLM, TGI and
`AutoModelForCausalLM.from_pretrained(DIR)` load with no other code.

    folder = export_run(run, Path("merged"), merged=True)    # export/folder.py stages it; this module fills it

The run's adapter is merged into the base weights (peft `merge_and_unload`). Where the
calibration head acts on token logits, its temperature is folded into the LM head, so the
served log-probabilities are the calibrated ones. Logits are z = W h (+ b); the head gives
z / tau + l, which is (W / tau) h + (b / tau + l): each row of W is divided by its tau, and
l joins the bias where the architecture's LM head has one. Tied input embeddings are
untied first (`tie_word_embeddings: false`), or the division would change the inputs too.

What folds, by where the head acts (`fold_plan`):
    exact        letter rule with a scalar head (a per-question constant does not change a
                 softmax, so centring folds too), vocab head or vector scaling where the
                 shifts fold into a bias (or are zero), open answers (vocab, scalar heads)
    temperature  tau folded; the LM head takes no bias, so l is shipped in
                 calibration_shift.safetensors and the card gives softmax(logits + l)
    formula      the head acts on option scores in a way no row can hold: cloze (one T on
                 summed log-likelihoods) or letter with a centred per-position head; the
                 weights are the adapted model's and the card gives the one-line formula
    none         the run has no head
An input-adaptive temperature (an adaptive head, ATS with features, a thermometer) reads
the question's hidden state: no weight holds it, so `--merged` is refused with the reason.

Every fold is checked when it is written, not assumed: the merged folder's scores on
CHECK_ITEMS, through the card's formula, against the studio's own scoring of the adapted
model with its head (calm_core.scoring.options); the numbers go into calm_export.json and
the card, and a fold that misses (an architecture that transforms logits after its LM head,
such as Gemma 2's soft-capping) is refused.
"""

from __future__ import annotations

import copy
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from safetensors import safe_open

from calm_core.calibration.head import CalibrationHead
from calm_core.calibration.head_base import HEAD_FILENAME, Head
from calm_core.calibration.posthoc import calibrators
from calm_core.data.schema import MCItem
from calm_core.export.merged_card import merged_card
from calm_core.export.record import EXPORT_FILE, export_record, variant_record
from calm_core.export.thermometer import THERMOMETER_FILE
from calm_core.io import default_mode
from calm_core.results.verdict import variant_label
from calm_core.runs.portable import Portable, portable_config
from calm_core.runs.rundir import RunDir
from calm_core.scoring.prompts import ScoringConfig, letter_token_ids

if TYPE_CHECKING:
    from calm_core.scoring.prompts import ScoringConfig

SETTINGS_FILES = ("config.json", "generation_config.json", "tokenizer_config.json")  # may record a local path
SHIFT_FILE = "calibration_shift.safetensors"  # kind `temperature`: l per vocabulary id, key `shift`
FOLD_KINDS = ("exact", "temperature", "formula", "none")
CHECK_TOLERANCE = 1e-4  # abs, on option probabilities: the merged folder must give the studio's numbers
CHECK_ITEMS = (
    MCItem("check-1", "What is the capital of France?", ("Paris", "Rome", "Madrid", "Berlin"), 0),
    MCItem("check-2", "Which gas do plants take in for photosynthesis?", ("oxygen", "carbon dioxide", "helium"), 1),
    MCItem("check-3", "How many legs does a spider have?", ("six", "eight"), 1),
)  # fixed questions: the check needs no dataset, and a reader can rerun it
_PROBE = "The capital of France is"  # the full-vocabulary check of a head that acts on tokens


@dataclass
class Fold:
    """What the merged weights hold of the head, and what the card says of the rest.
    `scale` (V,) divides lm_head's rows (None: nothing folded); `shift` (V,) is l per row:
    in the bias when `in_bias`, else shipped in SHIFT_FILE. `tau`, `shift_k` (K,) are the
    head's numbers for the `formula` kind."""

    kind: str
    scale: torch.Tensor | None = None
    shift: torch.Tensor | None = None
    in_bias: bool = False
    centred: bool = False
    tau: list[float] | None = None
    shift_k: list[float] | None = None


def refuse_adaptive(run: RunDir, what: str) -> None:
    """The one refusal for a temperature that reads the input: no weight can hold it."""
    raise ValueError(
        f"Expected a calibration with a constant temperature to fold into the LM head, but run {run.run_id} "
        f"exports {what}, a temperature read from each question's hidden state, which no weight of a plain "
        f"transformers model can hold: export the folder with its head instead (`calm export {run.run_id} DIR`, "
        "without --merged; calm_head.py applies it)"
    )


def fold_plan(head: Head | None, scoring: ScoringConfig, letters: list[int], lm_head: Any) -> Fold:
    """Decide what folds (module docstring). `letters`: the letter tokens' ids (letter
    rule), `lm_head`: the model's output layer (its rows and whether it has a bias)."""
    if head is None:
        return Fold("none")
    rows, has_bias = lm_head.weight.shape[0], lm_head.bias is not None
    tau = head.tau.detach().double()
    shift = None if head.shift is None else head.shift.detach().double()
    if head.acts_on == "options" and (scoring.is_cloze or (head.scope == "options" and head.centred)):
        shift_k = None if shift is None else shift.tolist()
        return Fold("formula", centred=head.centred, tau=tau.tolist(), shift_k=shift_k)
    if not isinstance(head, CalibrationHead):  # a temperature per question has no rows to fold into
        raise ValueError(f"Expected a constant head to fold into the LM head, but got the {head.scope} head")
    scale = torch.ones(rows, dtype=torch.float64)
    full = torch.zeros(rows, dtype=torch.float64)
    if head.scope == "scalar":
        scale[:] = 1.0 / tau[0]  # every row: a constant per question does not change a softmax
    elif head.scope == "vocab":
        if head.size > rows:
            raise ValueError(f"Expected at most {rows} head rows (the LM head's), but the vocab head has {head.size}")
        scale[: head.size], full[: head.size] = 1.0 / tau, shift
    else:  # an uncentred options head under the letter rule (vector scaling): option k is letter k's row
        index = torch.tensor(letters[: head.size])
        scale[index], full[index] = 1.0 / tau[: len(index)], shift[: len(index)]
    if not bool(full.any()):
        return Fold("exact", scale)
    return Fold("exact" if has_bias else "temperature", scale, full, in_bias=has_bias)


def untie(model: Any) -> bool:
    """Give the LM head its own weight, so folding leaves the input embeddings alone;
    whether they were tied."""
    out, inp = model.get_output_embeddings(), model.get_input_embeddings()
    tied = out.weight is inp.weight or out.weight.data_ptr() == inp.weight.data_ptr()
    if tied:
        out.weight = torch.nn.Parameter(out.weight.detach().clone())
    for config in {id(c): c for c in (model.config, model.config.get_text_config())}.values():
        if hasattr(config, "tie_word_embeddings"):
            config.tie_word_embeddings = False
    return tied


@torch.no_grad()
def apply_fold(model: Any, fold: Fold) -> bool:
    """Divide lm_head's rows (and bias) by tau; add l to the bias where it goes there.
    Whether the input embeddings were untied for it."""
    if fold.scale is None:
        return False
    tied = untie(model)
    out = model.get_output_embeddings()
    scale = fold.scale.to(out.weight.device)
    out.weight.copy_((out.weight.double() * scale[:, None]).to(out.weight.dtype))  # (V, d) * (V, 1)
    if out.bias is not None:
        bias = out.bias.double() * scale + (fold.shift.to(scale.device) if fold.in_bias else 0.0)
        out.bias.copy_(bias.to(out.bias.dtype))
    return tied


def served_scores(z: np.ndarray, fold: Fold, letters: list[int]) -> np.ndarray:
    """The card's formula on the merged model's option scores (N, K), -inf padded: what a
    reader computes from the folder to get the calibrated probabilities (softmax of it)."""
    z = np.asarray(z, dtype=np.float64)
    pad = np.isneginf(z)
    if fold.kind == "temperature":
        return z + fold.shift.numpy()[letters[: z.shape[1]]][None, :]
    if fold.kind != "formula":
        return z
    k = z.shape[1]
    tau = np.asarray(fold.tau if len(fold.tau) > 1 else fold.tau * k)[:k]
    safe = np.where(pad, 0.0, z)
    mean = safe.sum(1, keepdims=True) / np.maximum((~pad).sum(1, keepdims=True), 1) if fold.centred else 0.0
    out = (safe - mean) / tau[None, :] + mean + (np.asarray(fold.shift_k[:k])[None, :] if fold.shift_k else 0.0)
    return np.where(pad, -np.inf, out)


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@torch.no_grad()
def _token_logprobs(model: Any, tokenizer: Any, head: CalibrationHead | None = None) -> torch.Tensor:
    """log-probabilities (V,) at the probe's last position, through `head` where given."""
    ids = tokenizer(_PROBE, return_tensors="pt", add_special_tokens=False).input_ids.to(model.device)
    z = model(input_ids=ids).logits[0, -1].double()  # (V,)
    return torch.log_softmax(head(z) if head is not None else z, -1).cpu()


def studio_reference(
    model: Any, tokenizer: Any, head: Head | None, scoring: ScoringConfig, task: str
) -> dict[str, Any]:
    """The studio's calibrated numbers of the adapted model, before merging: option
    probabilities of CHECK_ITEMS (multiple choice) and, for a head acting on tokens, the
    probe's log-probabilities over the vocabulary."""
    from calm_core.scoring.scorer import Scorer

    out: dict[str, Any] = {}
    if task == "mcqa":
        scores = Scorer(model, tokenizer, progress=False).score(list(CHECK_ITEMS), scoring, head=head)
        out["options"] = _softmax(scores.logits)
    if isinstance(head, CalibrationHead) and head.acts_on == "tokens":
        out["tokens"] = _token_logprobs(model, tokenizer, copy.deepcopy(head).double())
    return out


def check_fold(model: Any, tokenizer: Any, fold: Fold, scoring: ScoringConfig, reference: dict, letters: list) -> dict:
    """The merged model's numbers through the card's formula against `reference`: the
    worst absolute differences, which `write_merged` holds to CHECK_TOLERANCE."""
    from calm_core.scoring.scorer import Scorer

    out: dict[str, Any] = {"items": [item.question for item in CHECK_ITEMS], "tolerance": CHECK_TOLERANCE}
    if "options" in reference:
        z = Scorer(model, tokenizer, progress=False).score(list(CHECK_ITEMS), scoring).logits
        probs = _softmax(served_scores(z, fold, letters))
        out["max_abs_diff"] = float(np.nanmax(np.abs(probs - reference["options"])))
        shown = zip(probs, CHECK_ITEMS, strict=True)
        out["probabilities"] = [[round(float(p), 6) for p in row[: it.n_choices]] for row, it in shown]
    if "tokens" in reference:
        served = _token_logprobs(model, tokenizer)
        if fold.kind == "temperature":
            served = torch.log_softmax(served + fold.shift, -1)
        out["max_abs_diff_vocab"] = float((served - reference["tokens"]).abs().max())  # log-probabilities
    return out


def merged_model(run: RunDir, source: Path) -> tuple[Any, Any, Any]:
    """(the PEFT model over a fresh float32 copy of the run's base model on the CPU, its
    tokenizer, the head or None). Unquantized: a QLoRA run's adapter merges into full weights."""
    from peft import PeftModel

    from calm_core.scoring.models import ModelSpec, load_model

    train = run.config.train
    base = load_model(ModelSpec(name=train.model, device="cpu", dtype="float32"))
    model = PeftModel.from_pretrained(base.model, str(source)).eval()
    head = CalibrationHead.load(source, train.task) if (source / HEAD_FILENAME).is_file() else None
    return model, base.tokenizer, head


def write_merged(run: RunDir, source: Path, folder: Path, variant: str) -> dict[str, Any]:
    """Every file of a merged export into `folder` (`export.folder.export_run` stages it); returns
    calm_export.json's record. Refuses an input-adaptive temperature before any load."""
    if (source / THERMOMETER_FILE).is_file():
        refuse_adaptive(run, "a thermometer")
    if (source / HEAD_FILENAME).is_file() and _head_scope(source / HEAD_FILENAME) == "adaptive":
        refuse_adaptive(run, variant_label(variant) if variant in calibrators() else "an adaptive head")
    train = run.config.train
    task = train.task
    scoring = ScoringConfig(rule=train.required("scoring"), chat_template=train.chat_template)
    model, tokenizer, head = merged_model(run, source)
    wanted = max([item.n_choices for item in CHECK_ITEMS] + [head.size if _per_option(head) else 0])
    letters = [] if scoring.is_cloze or task != "mcqa" else letter_token_ids(tokenizer, wanted, scoring)
    reference = studio_reference(model, tokenizer, head, scoring, task)
    model = model.merge_and_unload()
    fold = fold_plan(head, scoring, letters, model.get_output_embeddings())
    untied = apply_fold(model, fold)
    check = check_fold(model, tokenizer, fold, scoring, reference, letters)
    worst = max(check.get("max_abs_diff", 0.0), check.get("max_abs_diff_vocab", 0.0))
    if not worst <= CHECK_TOLERANCE:
        raise ValueError(
            f"Expected the merged model to give the studio's calibrated probabilities within {CHECK_TOLERANCE}, "
            f"but it is {worst:.2e} off ({model.config.model_type} may transform logits after its LM head): "
            f"export the folder with its head instead (`calm export {run.run_id} DIR`)"
        )
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    if fold.kind == "temperature":
        from safetensors.torch import save_file

        save_file({"shift": fold.shift.float().contiguous()}, str(folder / SHIFT_FILE), {"format": "calm_studio.shift"})
    for written in folder.iterdir():  # transformers writes its weights 0600: a serving account could not read them
        if written.is_file():
            os.chmod(written, default_mode())
    return merged_record(fold, check, letters, model, untied)


def _per_option(head: Head | None) -> bool:
    return head is not None and head.scope == "options"


def write_merged_folder(run: RunDir, step: int, source: Path, folder: Path, variant: str) -> None:
    """The merged folder: the model and tokenizer (`write_merged`), calm_export.json with
    its `merged` record, calm_config.json and the card; every JSON file passes through the
    run's Portable, so no local path leaves the machine, and config.json names the base
    model by its hub id (a converted copy records the GGUF's display name there)."""
    portable = Portable.of(run)
    merged = write_merged(run, source, folder, variant)
    record = portable.data({**export_record(run, step, source), **variant_record(run, variant), "merged": merged})
    for name in SETTINGS_FILES:  # a recorded path becomes a name (never the vocabulary: a token may look like one)
        if (folder / name).is_file():
            settings = portable.data(json.loads((folder / name).read_text(encoding="utf-8")))
            if name == "config.json":
                settings.update(base_model_names(settings, record["base_model_hub_id"]))
            _write_json(folder / name, settings)
    _write_json(folder / "calm_config.json", portable.data(portable_config(run.config)))
    _write_json(folder / EXPORT_FILE, record)
    (folder / "README.md").write_text(portable.text(merged_card(run, record)), encoding="utf-8")


def base_model_names(config: dict[str, Any], hub_id: str) -> dict[str, str]:
    """config.json's keys that name the model it came from, set to the base model's hub id:
    `_name_or_path`, and `_model_name_or_path` where the converted copy wrote one."""
    keys = ["_name_or_path", *(["_model_name_or_path"] if "_model_name_or_path" in config else [])]
    return dict.fromkeys(keys, hub_id)


def _write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def _head_scope(file: Path) -> str | None:
    with safe_open(str(file), framework="pt") as f:
        return (f.metadata() or {}).get("scope")


def merged_record(fold: Fold, check: dict, letters: list[int], model: Any, untied: bool) -> dict[str, Any]:
    """calm_export.json's `merged`: the fold's kind, its numbers and the check."""
    record: dict[str, Any] = {"fold": fold.kind, "check": check, "dtype": str(model.dtype).removeprefix("torch.")}
    record["tied_untied"] = untied  # the input embeddings were tied to the LM head: now they are not
    if fold.scale is not None:
        distinct = sorted({round(float(t), 12) for t in (1.0 / fold.scale).tolist()})
        record["temperature"] = distinct[0] if len(distinct) == 1 else None  # one tau for every row: say it
    if fold.kind == "temperature":
        record["shift_file"] = SHIFT_FILE
        record["letter_shifts"] = [float(fold.shift[i]) for i in letters[:8]]
    if fold.kind == "formula":
        record.update(tau=fold.tau, shift=fold.shift_k, centred=fold.centred)
        record["temperature"] = fold.tau[0] if len(fold.tau) == 1 else None
    record["bias_folded"] = bool(fold.in_bias)
    return record
