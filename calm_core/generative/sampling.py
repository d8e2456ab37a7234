"""Answer generation for open-ended QA: greedy and sampled, batched, with stop tokens.

    cfg = GenerationConfig(n_samples=10, temperature=1.0, top_p=1.0, max_new_tokens=16)
    sets = generate_answers(model, tokenizer, items, cfg, transform=head)   # one AnswerSet per item

Prompts (`GenerationConfig.prompt`, recorded with every result):
- `fewshot` (default): an instruction and three fixed question/answer demonstrations
  (general knowledge written here, not taken from any dataset), then
  `Question: {question}\\nAnswer:`. The embedded 135M model answers the first 64
  TriviaQA dev questions at 9.4% exact match this way and at 0% with the plain prompt
  (`calm eval --task openqa --data triviaqa/unfiltered_dev_sub3000 --limit 64
  --samples 0 --prompt fewshot|plain`).
- `plain`: `Question: {question}\\nAnswer:` alone (the MCQA cloze prompt without options).
- `chat`: the question and a short-answer instruction as a chat user turn.
The model continues with ` <answer>\\n`. Generation stops at the end-of-sequence token or at any token whose
text contains a newline; the answer is the text before that newline, stripped.

`transform` (a calibration head that acts on tokens, or `z / T` for temperature
scaling) is applied to every step's logits before greedy choice or sampling, as a
LogitsProcessor: a head's own (`as_logits_processor`, which refuses a head that acts on
option scores), any other callable through `TransformProcessor`. The greedy
answer's log-probability is the sum over its generated tokens, stop token included,
of log softmax(transform(z)): the probability of saying exactly this and stopping.
Sampling uses `temperature` and `top_p` after the transform, seeded per batch.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

import torch
from transformers import DynamicCache, LogitsProcessor, LogitsProcessorList

from calm_core.calibration.head import CalibrationHead
from calm_core.data.schema import OpenItem
from calm_core.scoring.forward import cache_kwarg, left_pad_batch
from calm_core.scoring.progress import ProgressFn, progress_callback
from calm_core.scoring.prompts import chat_prompt
from calm_core.settings import check_settings, setting

PLAIN_TEMPLATE = "Question: {question}\nAnswer:"
FEWSHOT_TEMPLATE = (
    "Answer each question with a short answer.\n\n"
    "Question: What is the capital of France?\nAnswer: Paris\n\n"
    "Question: Who wrote the play Romeo and Juliet?\nAnswer: William Shakespeare\n\n"
    "Question: Which planet is the largest in the Solar System?\nAnswer: Jupiter\n\n" + PLAIN_TEMPLATE
)
CHAT_INSTRUCTION = "Answer with a short phrase only."
PROMPTS = ("fewshot", "plain", "chat")


@dataclass(frozen=True)
class GenerationConfig:
    """How answers are generated; recorded with every open-QA result."""

    n_samples: int = setting(
        10,
        "sampled answers per question (semantic confidence); 0: greedy only",
        label="Sampled answers per question",
        min=0,
        max=10_000,
    )
    temperature: float = setting(1.0, "sampling temperature (after any calibration transform)", min=1e-6, max=100.0)
    top_p: float = setting(1.0, "nucleus sampling mass", min=1e-9, max=1.0)
    max_new_tokens: int = setting(
        16, "an answer ends at a newline or the end-of-sequence token", label="Max new tokens", min=1, max=512
    )
    prompt: str = setting(
        "fewshot",
        "fewshot: three fixed demonstrations, then the question; plain: the question alone; chat: a chat turn",
        label="Prompt",
        choices=tuple(PROMPTS),
    )
    batch_size: int = setting(16, "questions per generate() call", min=1, max=512)
    seed: int = setting(0, "seeds the sampled answers", min=0, max=2**32 - 1)
    grouping: str = setting(
        "embedding",
        "string: equal after normalising (case, punctuation, articles); embedding: also MiniLM cosine >= the "
        "threshold (paraphrases)",
        label="Group answers by",
        choices=("string", "embedding"),
    )
    grouping_threshold: float = setting(0.8, "embedding cosine at which two answers mean the same", min=1e-6, max=1.0)

    def __post_init__(self) -> None:
        check_settings(self)  # each setting's declared kind, choices and bounds

    def to_dict(self) -> dict[str, Any]:
        template = {"fewshot": FEWSHOT_TEMPLATE, "plain": PLAIN_TEMPLATE, "chat": CHAT_INSTRUCTION}[self.prompt]
        return {**asdict(self), "prompt_text": template}


@dataclass
class AnswerSet:
    """One question's generations: the greedy answer and n sampled ones."""

    id: str
    greedy: str
    greedy_logprob: float  # sum of log p over the greedy tokens, stop token included
    greedy_tokens: int
    greedy_entropy: float  # mean entropy (nats) of the next-token distribution over the greedy tokens
    samples: list[str] = field(default_factory=list)


def question_prompt(question: str, tokenizer: Any, prompt: str = "fewshot") -> str:
    """The text the model continues with its answer (see PROMPTS)."""
    if prompt == "chat":
        return chat_prompt(tokenizer, f"{question}\n{CHAT_INSTRUCTION}")
    return (FEWSHOT_TEMPLATE if prompt == "fewshot" else PLAIN_TEMPLATE).format(question=question)


_STOP_IDS: dict[tuple[str, int], tuple[int, ...]] = {}


def stop_token_ids(tokenizer: Any) -> tuple[int, ...]:
    """End-of-sequence id(s) and every id whose text contains a newline (cached per tokenizer)."""
    key = (getattr(tokenizer, "name_or_path", ""), len(tokenizer))
    if key not in _STOP_IDS:
        texts = tokenizer.batch_decode([[i] for i in range(len(tokenizer))])
        ids = {i for i, text in enumerate(texts) if "\n" in text}
        eos = tokenizer.eos_token_id
        ids.update(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        _STOP_IDS[key] = tuple(sorted(ids))
    return _STOP_IDS[key]


class TransformProcessor(LogitsProcessor):
    """Any logits transform (z / T, a test's lambda) as a generation LogitsProcessor."""

    def __init__(self, transform: Callable[[torch.Tensor], torch.Tensor]) -> None:
        self.transform = transform

    @torch.no_grad()
    def __call__(self, input_ids: torch.LongTensor, scores: torch.Tensor) -> torch.Tensor:
        return self.transform(scores.float()).to(scores.dtype)


def logits_processor(transform: Callable[[torch.Tensor], torch.Tensor]) -> LogitsProcessor:
    """A calibration head's own processor (it knows where it acts), or the transform's."""
    return transform.as_logits_processor() if isinstance(transform, CalibrationHead) else TransformProcessor(transform)


def temperature_transform(temperature: float) -> Callable[[torch.Tensor], torch.Tensor]:
    """z / T: post-hoc temperature scaling applied while generating."""
    return lambda z: z / temperature


def _trim(tokens: list[int], stops: set[int]) -> list[int]:
    """Generated ids up to and including the first stop id (padding after it dropped)."""
    out = []
    for token in tokens:
        out.append(token)
        if token in stops:
            break
    return out


def answer_text(tokenizer: Any, tokens: Sequence[int]) -> str:
    """The answer a generation gives: its text before the first newline, stripped."""
    text: str = tokenizer.decode(list(tokens), skip_special_tokens=True)
    return text.split("\n", 1)[0].strip()


def _generate(
    model: Any,
    tokenizer: Any,
    prompts: list[list[int]],
    cfg: GenerationConfig,
    sample: bool,
    processors: LogitsProcessorList,
) -> Any:
    device = next(model.parameters()).device
    batch = left_pad_batch(prompts, tokenizer.pad_token_id, device)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    extra: dict[str, Any] = {}
    if sample:  # n samples of a prompt share its prefill: run it once and copy the KV cache n times
        ids, mask, extra = _shared_prompt_cache(model, batch, cfg.n_samples)
    # top_k=0: transformers otherwise fills in its default top_k=50, which would cap the
    # samples at the 50 likeliest tokens and undo part of a flattening head or temperature.
    options: dict[str, Any] = (
        {"do_sample": True, "temperature": cfg.temperature, "top_p": cfg.top_p, "top_k": 0, **extra}
        if sample
        else {
            "do_sample": False,
            "temperature": None,
            "top_p": None,
            "top_k": None,
            "output_scores": True,
            "return_dict_in_generate": True,
        }
    )
    with torch.inference_mode():
        return model.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=cfg.max_new_tokens,
            eos_token_id=list(stop_token_ids(tokenizer)),
            pad_token_id=tokenizer.pad_token_id,
            logits_processor=processors,
            **options,
        )


def _shared_prompt_cache(
    model: Any, batch: dict[str, torch.Tensor], n: int
) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any]]:
    """Prompts (all but their last token) through the model once, the KV cache repeated
    n times per row; generate() then starts from the last prompt token. Same samples as
    `num_return_sequences=n` for the same seed (tested), without n copies of the prefill."""
    keyword = cache_kwarg(model)
    cache = DynamicCache(config=model.config)
    with torch.inference_mode():
        model(
            input_ids=batch["input_ids"][:, :-1],
            attention_mask=batch["attention_mask"][:, :-1],
            position_ids=batch["position_ids"][:, :-1],
            use_cache=True,
            logits_to_keep=1,
            **{keyword: cache},
        )
    cache.batch_repeat_interleave(n)  # (B, H, L, D) -> (B * n, H, L, D), each row's copies together
    ids = batch["input_ids"].repeat_interleave(n, dim=0)
    return ids, batch["attention_mask"].repeat_interleave(n, dim=0), {keyword: cache}


def _greedy(
    model: Any, tokenizer: Any, prompts: list[list[int]], cfg: GenerationConfig, processors: LogitsProcessorList
) -> list[tuple[list[int], float, float]]:
    out = _generate(model, tokenizer, prompts, cfg, False, processors)
    width = out.sequences.shape[1] - len(out.scores)
    logprobs = torch.stack([torch.log_softmax(s.float(), dim=-1) for s in out.scores], dim=1)  # (B, steps, V)
    stops = set(stop_token_ids(tokenizer))
    results = []
    for row in range(len(prompts)):
        tokens = _trim(out.sequences[row, width:].tolist(), stops)
        steps = logprobs[row, : len(tokens)]  # (c, V)
        picked = steps[torch.arange(len(tokens)), torch.tensor(tokens)]
        entropy = -(steps.exp() * steps.nan_to_num(neginf=0.0)).sum(-1).mean()
        results.append((tokens, float(picked.sum()), float(entropy)))
    return results


def _samples(
    model: Any, tokenizer: Any, prompts: list[list[int]], cfg: GenerationConfig, processors: LogitsProcessorList
) -> list[list[str]]:
    sequences = _generate(model, tokenizer, prompts, cfg, True, processors)
    width = max(len(p) for p in prompts)  # generate() returns the left-padded prompts, then the new tokens
    stops = set(stop_token_ids(tokenizer))
    texts = [answer_text(tokenizer, _trim(seq[width:].tolist(), stops)) for seq in sequences]
    return [texts[i * cfg.n_samples : (i + 1) * cfg.n_samples] for i in range(len(prompts))]


def _prompt_ids(items: Sequence[OpenItem], tokenizer: Any, cfg: GenerationConfig) -> list[list[int]]:
    return [
        tokenizer(question_prompt(it.question, tokenizer, cfg.prompt), add_special_tokens=False).input_ids
        for it in items
    ]


def generate_tokens(
    model: Any, tokenizer: Any, items: Sequence[OpenItem], cfg: GenerationConfig
) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, greedy answer ids up to and including the stop token) per item."""
    prompts = _prompt_ids(items, tokenizer, cfg)
    out: list[tuple[list[int], list[int]]] = []
    for start in range(0, len(prompts), cfg.batch_size):
        chunk = prompts[start : start + cfg.batch_size]
        out.extend(
            (p, tokens)
            for p, (tokens, _, _) in zip(
                chunk, _greedy(model, tokenizer, chunk, cfg, LogitsProcessorList()), strict=True
            )
        )
    return out


def generate_answers(
    model: Any,
    tokenizer: Any,
    items: Sequence[OpenItem],
    cfg: GenerationConfig | None = None,
    transform: Callable[[torch.Tensor], torch.Tensor] | None = None,
    progress: bool | ProgressFn = False,
) -> list[AnswerSet]:
    """Greedy answer (with its log-probability) and cfg.n_samples sampled answers per item.

    Items are batched in order of prompt length; results come back in item order and do
    not depend on the batch size for the greedy answer (sampling draws from one seeded
    generator per batch, so samples depend on the batching, as any sampler's do).
    """
    cfg = cfg or GenerationConfig()
    processors = LogitsProcessorList([logits_processor(transform)] if transform is not None else [])
    prompts = _prompt_ids(items, tokenizer, cfg)
    order = sorted(range(len(items)), key=lambda i: len(prompts[i]))
    results: list[AnswerSet | None] = [None] * len(items)
    update, close = progress_callback(progress, len(items), "generating answers")
    try:
        for start in range(0, len(order), cfg.batch_size):
            chunk = order[start : start + cfg.batch_size]
            batch_prompts = [prompts[i] for i in chunk]
            greedy = _greedy(model, tokenizer, batch_prompts, cfg, processors)
            sampled: list[list[str]] = [[] for _ in chunk]
            if cfg.n_samples:
                torch.manual_seed(cfg.seed + start)
                sampled = _samples(model, tokenizer, batch_prompts, cfg, processors)
            for i, (tokens, logprob, entropy), samples in zip(chunk, greedy, sampled, strict=True):
                results[i] = AnswerSet(
                    items[i].id, answer_text(tokenizer, tokens), logprob, len(tokens), entropy, samples
                )
            update(start + len(chunk), len(items))
    finally:
        close()
    return [r for r in results if r is not None]
