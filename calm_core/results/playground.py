"""A finished run as something to ask questions: option probabilities under base, TS,
adaptive TS and the calibrated model, and generation with the calibration head.

    trained = load_trained(RunDir.at(run_id))
    probs = option_probabilities(trained, MCItem("q", "Which gas ...?", ("oxygen", "helium"), 0))
    tokens = generate(trained, "Name a noble gas.", max_new_tokens=12)
    answers = open_answers_for(trained, "What is the capital of Peru?")   # open-QA runs

The trained model is the run's base model with the adapter of its selected step (else its latest checkpoint)
(PEFT) and its calibration head; `base` switches the adapter off, `ts` divides the
base scores by the temperature the run fitted on S_V.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from calm_core.calibration import metrics
from calm_core.calibration.head import CalibrationHead
from calm_core.calibration.head_base import HEAD_FILENAME, Head
from calm_core.data.schema import MCItem, OpenItem
from calm_core.generative.sampling import GenerationConfig, generate_answers, temperature_transform
from calm_core.generative.semantic import grouping_for, modal_confidence
from calm_core.runs.records import RunResults
from calm_core.runs.rundir import RunDir
from calm_core.scoring.adapters import evaluating
from calm_core.scoring.models import LoadedModel, ModelSpec, load_model
from calm_core.scoring.options import apply_option_head
from calm_core.scoring.prompts import ScoringConfig, chat_prompt
from calm_core.scoring.scorer import Capture, Scorer


@dataclass
class TrainedModel:
    run_id: str | None
    method: str | None
    lm: LoadedModel  # model: a PeftModel when a run is loaded
    head: Head | None
    temperature: float | None  # the run's TS temperature (fit on S_V), if it fitted one
    scoring: ScoringConfig
    task: str = "mcqa"  # the run's task: mcqa | openqa
    generation: GenerationConfig | None = None  # an open-QA run's generation settings (sampling, grouping)
    adaptive: Any = None  # the run's adaptive temperature scaling (fit on S_V), if it fitted one


def untrained(lm: LoadedModel, scoring: ScoringConfig | None = None) -> TrainedModel:
    """The base model alone (no run chosen): only the `base` variant exists."""
    return TrainedModel(None, None, lm, None, None, scoring or ScoringConfig())


def load_trained(run: RunDir, device: str = "auto") -> TrainedModel:
    """The run's model as Compare, the export and `calm eval --run` see it: the step the
    calibrated stop selected, else the latest complete checkpoint (a fresh base model:
    PEFT wraps in place, so a shared cached model is never touched)."""
    from peft import PeftModel

    latest = run.exported_step()  # ValueError with the reason when the run has no checkpoint yet
    train = run.config.train
    base = load_model(ModelSpec(name=train.model, device=device, dtype=train.dtype))
    model = PeftModel.from_pretrained(base.model, str(latest[1])).eval()
    task = train.task
    # the task gives a head saved before heads said where they act its place (openqa: tokens)
    head = CalibrationHead.load(latest[1], task) if (latest[1] / HEAD_FILENAME).is_file() else None
    recorded = run.results_or_none()
    ts = recorded.calibrator("ts") if recorded is not None else None
    temperature = ts.temperature if ts is not None else None

    lm = LoadedModel(model, base.tokenizer, base.spec, {**base.info, "adapter": str(latest[1])})
    scoring = ScoringConfig(rule=train.required("scoring"), chat_template=train.chat_template)
    generation = GenerationConfig(**train.generation) if task == "openqa" and train.generation else None
    return TrainedModel(
        run.run_id,
        train.required("method"),
        lm,
        head.to(lm.device) if head else None,
        temperature,
        scoring,
        task,
        generation,
        _adaptive(recorded) if recorded is not None else None,
    )


def _adaptive(results: RunResults) -> Any:
    """The run's `ats` as results.json records it (None when it fitted none: its note; or
    when the record predates results.json keeping the weights: it would be one temperature)."""
    from calm_core.calibration.posthoc.ats import AdaptiveTemperature

    record = results.calibrator("ats")
    if record is None or record.note is not None or (record.get("components") and not record.get("weights")):
        return None
    return AdaptiveTemperature.from_json(record.to_json(), "`ats` in results.json")


def _scores(trained: TrainedModel, item: MCItem, adapter: bool, head: bool) -> np.ndarray:
    return _scored(trained, item, adapter, head)[0]


def _scored(
    trained: TrainedModel, item: MCItem, adapter: bool, head: bool, features: bool = False
) -> tuple[np.ndarray, np.ndarray | None]:
    """(option scores (1, K), hidden state (1, H) when `features`), from one pass."""
    model = trained.lm.model
    capture = Capture.FEATURES if features else Capture.NOTHING
    with evaluating(model, adapter):
        scorer = Scorer(model, trained.lm.tokenizer, progress=False)
        scores = scorer.score([item], trained.scoring, head=trained.head if head else None, capture=capture)
    return scores.logits[:, : item.n_choices], scores.features


def option_probabilities(trained: TrainedModel, item: MCItem) -> dict[str, np.ndarray]:
    """{variant: option probabilities (K,)}: base, ts (if fitted), the run's method with
    its head (theta + alpha) and without it (theta only). A head that acts on option
    scores is applied to the adapter's scores (one forward pass, as the trainer does)."""
    base, h = _scored(trained, item, adapter=False, head=False, features=trained.adaptive is not None)
    out = {"base": base}
    if trained.temperature:
        out["ts"] = base / trained.temperature
    if trained.adaptive is not None:  # this question's own temperature, from its hidden state
        out["ats"] = trained.adaptive.transform(base, h)
    method = trained.method  # a loaded run's method; None for the base model alone (`untrained`)
    if trained.run_id is not None and method is not None:
        head = trained.head
        reads = head is not None and head.reads_features  # the adaptive head: the adapted model's state
        theta, h_theta = _scored(trained, item, adapter=True, head=False, features=reads)
        if head is None or head.acts_on == "options":  # the forward pass is theta's: reuse it
            out[method] = apply_option_head(theta, head, h_theta)
        else:
            out[method] = _scores(trained, item, adapter=True, head=True)
        if head is not None:
            out[f"{method}_theta_only"] = theta
    return {name: metrics.softmax(logits)[0] for name, logits in out.items()}


def head_acts_on_tokens(trained: TrainedModel) -> bool:
    """Whether the run's head changes next-token probabilities (`CalibrationHead.acts_on`):
    a vocab head and an open-QA run's scalar head do; an MCQA options / scalar head acts
    on option scores, so generation shows no effect of it."""
    return trained.head is not None and trained.head.acts_on == "tokens"


def generate(trained: TrainedModel, prompt: str, max_new_tokens: int = 24, chat: bool = True) -> list[dict[str, Any]]:
    """Greedy answer to `prompt`, one row per new token: the token, its probability under
    the model as generated (with the head as a LogitsProcessor where it acts on tokens)
    and without the head. An MCQA options / scalar head acts on option scores, not tokens: rows then
    show the adapted model's probabilities twice (`head_acts_on_tokens`). `special` marks the
    tokenizer's special tokens (`generated_text` leaves them out)."""
    tokenizer, model = trained.lm.tokenizer, trained.lm.model
    text = chat_prompt(tokenizer, prompt) if chat and getattr(tokenizer, "chat_template", None) else prompt
    ids = tokenizer(text, return_tensors="pt", add_special_tokens=False).input_ids.to(trained.lm.device)
    head = trained.head if isinstance(trained.head, CalibrationHead) else None  # only these act on tokens
    processors = [head.as_logits_processor()] if head is not None and head_acts_on_tokens(trained) else []
    with torch.inference_mode():
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            logits_processor=processors,
            output_scores=True,
            output_logits=True,
            return_dict_in_generate=True,
            pad_token_id=tokenizer.pad_token_id,
        )
    rows, special = [], set(tokenizer.all_special_ids)
    for step, token in enumerate(out.sequences[0, ids.shape[1] :].tolist()):
        calibrated = torch.softmax(out.scores[step][0].float(), dim=-1)[token]
        raw = torch.softmax(out.logits[step][0].float(), dim=-1)[token]
        rows.append(
            {
                "token": tokenizer.decode([token]),
                "p_calibrated": float(calibrated),
                "p_without_head": float(raw),
                "special": token in special,
            }
        )
        if token == tokenizer.eos_token_id:
            break
    return rows


def generated_text(rows: list[dict[str, Any]]) -> str:
    """The answer a person reads: the generated tokens without special ones (`<|im_end|>`,
    the end of sequence), which `generate` keeps as rows so their probabilities show."""
    return "".join(row["token"] for row in rows if not row.get("special"))


def open_answers_for(
    trained: TrainedModel, question: str, cfg: GenerationConfig | None = None, theta_only: bool = True
) -> dict[str, dict[str, Any]]:
    """{variant: answers} for one typed open question, in the order base, ts (if the run
    fitted a temperature), the run's method (adapter and head) and, with `theta_only`
    and a head, the adapter alone. `cfg` defaults to the run's generation settings.

    Each variant's dict: `greedy` (answer text), `seq_prob` (probability of saying
    exactly it and stopping), `samples` (cfg.n_samples sampled answers), `clusters`
    (one label per sample, grouped as cfg.grouping says), and with at least one sample
    `answer` (the modal cluster's first member) and `confidence` (Sem1: that cluster's
    share of the samples); without samples both are None."""
    cfg = cfg or trained.generation or GenerationConfig()
    if not question.strip():
        raise ValueError("Expected a question, but got an empty one")
    item = OpenItem(id="typed", question=question.strip(), answers=())
    grouping = grouping_for(cfg.grouping, cfg.grouping_threshold)
    head = trained.head
    variants: list[tuple[str, bool, Any]] = [("base", False, None)]
    if trained.temperature:
        variants.append(("ts", False, temperature_transform(trained.temperature)))
    if trained.run_id is not None:
        variants.append((trained.method or "trained", True, head))
        if head is not None and theta_only:
            variants.append((f"{trained.method}_theta_only", True, None))
    model = trained.lm.model
    out: dict[str, dict[str, Any]] = {}
    for name, adapter, transform in variants:
        with evaluating(model, adapter):
            answers = generate_answers(model, trained.lm.tokenizer, [item], cfg, transform=transform)[0]
        labels = grouping(answers.samples) if answers.samples else []
        answer, confidence = None, None
        if labels:
            index, confidence = modal_confidence(labels)
            answer = answers.samples[index]
        out[name] = {
            "greedy": answers.greedy,
            "seq_prob": float(np.exp(answers.greedy_logprob)),
            "samples": list(answers.samples),
            "clusters": list(labels),
            "answer": answer,
            "confidence": confidence,
        }
    return out
