"""The studio's words, declared once: each term a practitioner meets, in one or two plain
sentences.

    define("ECE")                 # the definition, for a help tooltip or a caption
    lookup("calm_theta_only")     # its Term ("CALM, adapter only"), or None
    tooltip("ECE", "NLL")         # "**ECE**: ...\\n\\n**NLL**: ..." for a widget's help=
    markdown()                    # docs/glossary.md, written by `python -m calm_core.glossary`

Why one declaration: the pages' tooltips and captions and docs/glossary.md are built from
these entries, so a page and the docs cannot define a word two ways, and a test
(tests/test_glossary.py) fails when a page shows a variant, a flag or a metric that has no
entry here, or when docs/glossary.md is not what `markdown()` writes.

A term is found by its name or any of its `also` spellings (the variant keys and metric
columns the tables show: "ts", "ece_10"), exactly first, then ignoring case. A trained
method's adapter-only variant, `<method>_theta_only` or "<its name>, adapter only", is
found as "adapter only" when the method itself is defined here; `calm_theta_only` ("CALM,
adapter only") has its own entry.

Nothing here imports the rest of calm_core: the words are plain data (layer 1), and the
test checks them against the registries (calibrators, methods, metric columns, flags).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

THETA_ONLY = "_theta_only"  # the suffix of a trained method's adapter-only variant
ADAPTER_ONLY = ", adapter only"  # and of its name in full (workspace/verdict.py variant_label)


@dataclass(frozen=True)
class Term:
    """One word of the studio: `name` as the docs head it, its `definition` in plain words,
    the `also` spellings pages show (variant keys, column names, symbols), and the `group`
    it is listed under in docs/glossary.md."""

    name: str
    definition: str
    group: str
    also: tuple[str, ...] = ()

    @property
    def spellings(self) -> tuple[str, ...]:
        """The name first, then the other spellings."""
        return (self.name, *self.also)


METRICS, VARIANTS, METHODS, DATA, SCORING, BOME, STOP, OPEN = (
    "Calibration metrics",
    "Variants: what a run compares",
    "Training methods",
    "Data",
    "Scoring and the calibration head",
    "The bilevel step (BOME)",
    "The calibrated stop and the verdict",
    "Open answers",
)
GROUPS = (METRICS, VARIANTS, METHODS, DATA, SCORING, BOME, STOP, OPEN)  # docs/glossary.md's order

TERMS: tuple[Term, ...] = (
    # ------------------------------------------------------------------ metrics
    Term(
        "ECE",
        "Expected calibration error: how far the model's confidence is from how often it is right, averaged over "
        "15 confidence bins. 0 is perfect; a model 80% sure and right 60% of the time scores about 0.20 (lower is "
        "better).",
        METRICS,
        ("ece", "expected calibration error", "ECE (15 bins)"),
    ),
    Term("ECE (10 bins)", "The same ECE over 10 bins, as the CALM paper reports it.", METRICS, ("ece_10",)),
    Term(
        "MCE",
        "Maximum calibration error: the largest gap between confidence and accuracy in any one of the 15 bins.",
        METRICS,
        ("mce",),
    ),
    Term(
        "adaptive ECE",
        "ECE over 15 bins holding the same number of items each, so crowded confidence ranges are split finer.",
        METRICS,
        ("adaptive_ece",),
    ),
    Term(
        "classwise ECE",
        "ECE measured for every option position's probability, not only the chosen answer's, then averaged.",
        METRICS,
        ("classwise_ece",),
    ),
    Term(
        "smooth ECE",
        "A version of ECE without bins (Błasiok & Nakkiran 2023): it smooths confidence against correctness, so "
        "the figure does not jump when the bin edges move.",
        METRICS,
        ("smooth_ece",),
    ),
    Term(
        "NLL",
        "Negative log-likelihood: minus the log of the probability the model gave the right answer, averaged over "
        "items. It punishes confident mistakes hardest (lower is better); the calibrated stop and the "
        "recommendation are decided on it.",
        METRICS,
        ("nll", "negative log-likelihood"),
    ),
    Term(
        "Brier",
        "Brier score: the squared distance between the predicted probabilities and the answer (1 for the right "
        "option, 0 for the others), averaged over items. Lower is better: it rewards being right and honest about "
        "it.",
        METRICS,
        ("brier", "Brier score"),
    ),
    Term(
        "AUROC",
        "How well confidence separates right answers from wrong ones: the chance that a right answer got more "
        "confidence than a wrong one. 0.5 is no separation, 1 perfect; read it beside ECE, since a forecast "
        "equally unsure of everything has a small ECE and an AUROC near 0.5.",
        METRICS,
        ("auroc",),
    ),
    Term(
        "AURC",
        "Area under the risk-coverage curve: the mean error rate when the model answers only the questions it is "
        "most confident about, over every cut-off. Lower is better.",
        METRICS,
        ("aurc",),
    ),
    Term(
        "accuracy",
        "The share of items whose most probable option is the right one (open answers: the greedy answer matches "
        "an accepted answer).",
        METRICS,
        ("acc", "Accuracy"),
    ),
    Term("n", "The number of items evaluated.", METRICS, ("items",)),
    Term(
        "confidence",
        "The probability the model puts on the answer it picks; tables show its mean over the items. A calibrated "
        "model's mean confidence is close to its accuracy.",
        METRICS,
        ("mean confidence", "Mean confidence"),
    ),
    Term(
        "entropy",
        "How spread out a forecast is over the options, in nats: 0 when all probability sits on one option, ln K "
        "when it is spread evenly over K options.",
        METRICS,
        ("mean entropy", "entropy (nats)"),
    ),
    Term(
        "ln K",
        "The largest entropy K options can have, when all are equally likely: the ceiling on the entropy chart. A "
        "forecast near it says nothing about which answer is right.",
        METRICS,
        ("K",),
    ),
    Term(
        "reliability diagram",
        "Accuracy against confidence, bin by bin: a calibrated model's points lie on the diagonal, an overconfident "
        "model's below it.",
        METRICS,
        ("reliability",),
    ),
    Term(
        "90% interval",
        "The range the figure would take in 90% of resamples of the same items (a bootstrap): a difference whose "
        "interval includes zero cannot be told from noise.",
        METRICS,
        ("bootstrap interval", "90% bootstrap interval", "paired interval"),
    ),
    # ------------------------------------------------------------------ variants
    Term(
        "base",
        "The model as it is: no fine-tuning and no calibrator. Every other variant is measured against it.",
        VARIANTS,
        ("the model as it is",),
    ),
    Term(
        "TS",
        "Temperature scaling: every score is divided by one number T fitted on the labels of S_V. T above 1 makes "
        "the model less sure, below 1 more sure; the answer it picks never changes.",
        VARIANTS,
        ("ts", "temperature scaling", "Temperature scaling"),
    ),
    Term(
        "vector scaling",
        "A temperature and a shift per option position (A, B, C, ...), fitted on the labels of S_V. On these pages "
        '"vs" always means vector scaling, never "versus".',
        VARIANTS,
        ("vs", "VS", "Vector scaling"),
    ),
    Term(
        "ATS",
        "Adaptive temperature scaling: a temperature per question, read from the model's hidden state by a small "
        "model fitted on S_V, so a question the model knows is treated differently from one it does not. The "
        "answers stay the model's.",
        VARIANTS,
        ("ats", "adaptive temperature scaling", "Adaptive temperature scaling"),
    ),
    Term(
        "thermometer",
        "A temperature for a whole new dataset, predicted from its unlabelled questions by a small model trained on "
        "other, labelled datasets (Shen et al. 2024): for a domain with no labels to fit TS on.",
        VARIANTS,
        ("Thermometer",),
    ),
    Term(
        "bias scaling",
        "A shift per option position fitted on the labels of S_V: it corrects a preference for, say, option A, "
        "without changing how sure the model is overall.",
        VARIANTS,
        ("bs", "Bias scaling"),
    ),
    Term(
        "CALM, adapter only",
        "A CALM run's fine-tuned adapter (theta) without its calibration head: how much of the change comes from "
        "fine-tuning. If it equals the model as it is, the whole effect is the head's temperature.",
        VARIANTS,
        ("calm_theta_only",),
    ),
    Term(
        "adapter only",
        "A trained run's adapter without its calibration head (`<method>_theta_only`): what fine-tuning alone did.",
        VARIANTS,
        ("theta only",),
    ),
    Term(
        "variant",
        "One way of producing the probabilities that is compared on the same items: the model as it is, a post-hoc "
        "calibrator (temperature scaling, vector scaling, ...) or the trained model.",
        VARIANTS,
        ("variants",),
    ),
    Term(
        "post-hoc calibrator",
        "A correction fitted after training on held-out labels (S_V), leaving the model's weights alone: "
        "temperature scaling, vector scaling, adaptive temperature scaling.",
        VARIANTS,
        ("post-hoc",),
    ),
    # ------------------------------------------------------------------ methods
    Term(
        "CALM",
        "Calibration during fine-tuning: a LoRA adapter learns the task while a calibration head learns to keep "
        "held-out predictions from being overconfident, tied together so the head cannot undo what the adapter "
        "learned.",
        METHODS,
        ("calm",),
    ),
    Term(
        "SFT",
        "Supervised fine-tuning: the adapter learns to put probability on the right answers, with no calibration "
        "goal. The baseline CALM is measured against.",
        METHODS,
        ("sft", "supervised fine-tuning"),
    ),
    Term(
        "scalar",
        "As a method: CALM with one learned temperature instead of one per answer token. As a head scope: one "
        "temperature for every answer.",
        METHODS,
        ("CALM with one temperature",),
    ),
    Term(
        "iterate",
        "A CALM ablation: the adapter and the head take turns, each on its own goal, with nothing tying them together.",
        METHODS,
        ("alternating updates", "alternating updates (ablation)"),
    ),
    Term(
        "regularization",
        "A single-level ablation: fine-tune on the answers while rewarding uncertainty on them with a fixed weight "
        "beta.",
        METHODS,
        ("entropy regularization", "entropy regularization (ablation)"),
    ),
    Term(
        "label smoothing",
        "Fine-tuning that aims at slightly less than 100% on the right answer and spreads the rest over the other "
        "options.",
        METHODS,
        ("label_smoothing",),
    ),
    Term(
        "CFT",
        "Calibration-aware fine-tuning: supervised fine-tuning plus a penalty on the gap between confidence and "
        "accuracy in bins.",
        METHODS,
        ("cft", "calibration-aware fine-tuning"),
    ),
    Term(
        "LoRA",
        "Low-rank adapter: a small set of extra weights trained on top of the frozen model, cheap to train and to "
        "ship. QLoRA does the same on a 4-bit copy of the model.",
        METHODS,
        ("QLoRA", "adapter"),
    ),
    Term(
        "preset",
        "A starting set of training settings: quick (minutes on a laptop CPU) or paper (the paper's settings, for a "
        "GPU).",
        METHODS,
        ("quick", "paper"),
    ),
    # ------------------------------------------------------------------ data
    Term(
        "S_T",
        "The training set: labelled questions the adapter is fine-tuned on.",
        DATA,
        ("training set", "train"),
    ),
    Term(
        "S_V",
        "The held-out set: labelled questions not trained on. CALM's head learns on its questions, post-hoc "
        "calibrators are fitted on its labels, and the run's step and the recommendation are chosen on it.",
        DATA,
        ("held-out set", "heldout", "held-out"),
    ),
    Term(
        "test split",
        "Questions kept out of both training and S_V and used only to measure: nothing is chosen on them, so their "
        "figures are a fair check.",
        DATA,
        ("test", "test set"),
    ),
    Term(
        "evaluation set",
        "A dataset the finished run is measured on: the first is in domain (the test split of the training data), "
        "the others out of domain, to show whether the calibration carries over.",
        DATA,
        ("evaluation sets",),
    ),
    Term(
        "out of domain",
        "Questions of another kind than the training set: a calibration that holds there carries over.",
        DATA,
        ("in domain",),
    ),
    # ------------------------------------------------------------------ scoring and head
    Term(
        "cloze",
        "Scoring each option by how likely the model finds its text as the answer's continuation (cloze_norm: per "
        "token, so long options are not penalised).",
        SCORING,
        ("cloze_norm",),
    ),
    Term(
        "letter scoring",
        "The options are listed as A. B. C. ... and the model's score for each is its logit for that letter (the "
        "paper's format).",
        SCORING,
        ("letter",),
    ),
    Term("scoring rule", "How an option's score is read from the model: cloze or letter.", SCORING, ("Scoring",)),
    Term(
        "calibration head",
        "A temperature tau and a shift l applied to the answer scores after the network; CALM learns it beside the "
        "adapter, and it travels with the exported model.",
        SCORING,
        ("head",),
    ),
    Term(
        "head scope",
        "How many temperatures the head has: vocab (one per vocabulary token, the paper's, acting on the answer "
        "letters), options (one per option position), scalar (one for all) or adaptive (one per question, read "
        "from the model's hidden state, so it can cool a question the model knows less than one it does not).",
        SCORING,
        ("scope", "Head scope"),
    ),
    Term(
        "vocab",
        "Head scope: a temperature and a shift per vocabulary token, applied to the answer letters' scores (the "
        "paper's form); it also changes free generation.",
        SCORING,
    ),
    Term("options", "Head scope: a temperature and a shift per option position (A, B, C, ...).", SCORING),
    Term(
        "alpha",
        "The calibration head's parameters: its temperatures tau and shifts l.",
        SCORING,
        ("α",),
    ),
    Term(
        "tau",
        "A temperature of the head: the option's (or token's) score is divided by it. Above 1 the model is less "
        "sure, below 1 more sure.",
        SCORING,
        ("τ",),
    ),
    Term(
        "l",
        "A shift the head adds to an option's (or token's) score: it moves probability towards that option or away "
        "from it.",
        SCORING,
    ),
    Term(
        "temperature",
        "A number T that every score is divided by before the probabilities are taken: above 1 softens them, below "
        "1 sharpens them, and the ranking stays.",
        SCORING,
        ("T", "Temperature T"),
    ),
    Term(
        "theta",
        "The adapter's weights: what fine-tuning changes in the model.",
        SCORING,
        ("θ",),
    ),
    # ------------------------------------------------------------------ BOME
    Term(
        "BOME",
        "The optimisation step CALM uses (Ye et al. 2022): it first checks how well the adapter could still fit "
        "the training batch, then moves adapter and head together so the head calibrates S_V without losing that "
        "fit.",
        BOME,
        ("bilevel",),
    ),
    Term(
        "lower level",
        "The inner goal: fit the training questions S_T (the adapter's cross-entropy on them). A step that loses "
        "this fit is never selected.",
        BOME,
        ("lower", "S_T cross-entropy"),
    ),
    Term(
        "upper level",
        "The outer goal: make the predictions on S_V less overconfident (raise their entropy) by moving the head.",
        BOME,
        ("upper",),
    ),
    Term(
        "theta~",
        "A copy of theta after a few extra training steps on the batch (the inner solve): how well theta could fit "
        "that batch. q compares theta with it.",
        BOME,
        ("theta tilde", "inner solve"),
    ),
    Term(
        "q",
        "How much better the adapter could fit the current training batch after a few extra steps (theta~) than "
        "it fits it now (theta). BOME keeps it from growing, so calibrating does not cost the training fit.",
        BOME,
    ),
    Term(
        "lambda",
        "The weight a step gives to keeping the training fit (q) against the calibration goal. It grows when the "
        "two pull against each other and sits at eta when they do not interact.",
        BOME,
        ("λ",),
    ),
    Term(
        "eta",
        "A setting: the least weight lambda gives the training fit. Larger keeps the fit better and calibrates "
        "more slowly.",
        BOME,
        ("η",),
    ),
    Term(
        "xi",
        "The step size BOME's promise is stated in: the larger of the adapter's and the head's step sizes.",
        BOME,
        ("ξ",),
    ),
    Term(
        "phi",
        "How far q must at least fall per unit step: eta times the size of q's gradient squared (or eta times q). "
        "xi times phi is the promised decrease.",
        BOME,
        ("φ", "xi·phi", "xi * phi"),
    ),
    Term(
        "inner steps",
        "How many training steps on the batch make theta~ (BOME's T; the paper uses 10, the quick preset 3).",
        BOME,
        ("Inner steps T", "inner_steps"),
    ),
    Term(
        "inner drop",
        "The share of the batch's training loss that the few extra steps (the inner solve) remove. Near 0, theta~ "
        "is theta and nothing ties the head to the training fit.",
        BOME,
        ("inner_drop_frac", "inner drop frac", "inner drop fraction"),
    ),
    Term(
        "coupling ratio",
        "How strongly the training-fit goal pulls on the head, against the calibration goal. Near 0, the head "
        "ignores the fit and only raises entropy.",
        BOME,
        ("coupling_ratio",),
    ),
    Term(
        "cos",
        "Whether the calibration direction and the training-fit direction agree (+1), are unrelated (0) or oppose "
        "each other (-1). When they oppose, lambda grows to hold the fit.",
        BOME,
        ("cos_fq",),
    ),
    Term(
        "descent ratio",
        "Whether the step kept BOME's promise to shrink q by at least a set amount (xi times phi): 1 or more means "
        "it did. Only plain gradient steps make the promise; AdamW voids it.",
        BOME,
        ("descent_ratio",),
    ),
    Term(
        "inert",
        "A run whose inner solve barely moves theta~ and whose lambda sits at eta: the head then ignores the "
        "training fit, like `iterate`. Raise the inner steps or the inner step size.",
        BOME,
    ),
    Term(
        "healthy",
        "A BOME chart whose last logged values pass its rule (shown in its tooltip); watch: one that does not, with "
        "what to look at.",
        BOME,
        ("watch",),
    ),
    # ------------------------------------------------------------------ stop and verdict
    Term(
        "calibrated stop",
        "The run keeps the step where S_V's NLL is lowest while the training fit and S_V accuracy hold, not its "
        "last step, and stops once several evaluations bring no better step.",
        STOP,
        ("stopped early",),
    ),
    Term(
        "selected step",
        "The step the run's model is from, chosen by the calibrated stop; the charts mark it.",
        STOP,
        ("selected",),
    ),
    Term(
        "tolerance",
        "How far the training fit (the lower level) may worsen from step 0, as a share, before a step can no longer "
        "be selected.",
        STOP,
        ("lower_tolerance",),
    ),
    Term(
        "best calibrated",
        "The variant with the lowest ECE on a set among those that keep the base model's accuracy and AUROC; a tie "
        "when the items cannot tell it from another.",
        STOP,
        ("tie",),
    ),
    Term(
        "near-uniform",
        "Flag: confidence is close to chance (1/K) although the model is clearly better than chance. Its small ECE "
        "hides what the model knows.",
        STOP,
    ),
    Term(
        "under-confident",
        'Flag: the mean confidence is more than 0.10 below the accuracy: the model says "40% sure" of answers it gets '
        "right two times in three.",
        STOP,
    ),
    Term(
        "accuracy lost",
        "Flag: the variant answers fewer questions right than the model as it is, by more than one point (one item "
        "under 100 items).",
        STOP,
    ),
    Term(
        "recommended on S_V",
        "What the run advises using, chosen on S_V, never on a test set: keep the model as it is unless a change "
        "lowers S_V's NLL beyond the noise.",
        STOP,
        ("recommended", "recommendation"),
    ),
    Term(
        "k-fold on all labelled items",
        "Fit the post-hoc calibrators on every labelled item (S_T and S_V together), cut in k parts: each item is "
        "scored by a fit on the other parts, so more items decide whether a calibrator helps. The setting "
        "calibrate_on = all.",
        STOP,
        ("k-fold", "calibrate_on", "all labelled items"),
    ),
    Term(
        "cross-fitted",
        "A calibrator scored on S_V items it was not fitted on (S_V cut in folds, each scored by a fit on the "
        "others), so its gain is not flattered.",
        STOP,
    ),
    # ------------------------------------------------------------------ open answers
    Term(
        "Sem1",
        "Open answers' confidence: the share of the sampled answers that mean the same as the most common one.",
        OPEN,
        ("Sem1 confidence", "Semantic ECE"),
    ),
    Term(
        "sem_acc",
        "Open answers: the accuracy of the most common meaning among the samples (the answer Sem1 is about).",
        OPEN,
    ),
    Term(
        "Sem2",
        "A split-half confidence: the first half's most common answer, scored by its share of the second half.",
        OPEN,
        ("sem2_ece_10",),
    ),
    Term(
        "sequence probability",
        "The probability of the greedy answer's tokens together; seq_ece_10 is its ECE over 10 bins.",
        OPEN,
        ("seq_ece_10",),
    ),
    Term(
        "greedy",
        "The answer made by always taking the most probable next token.",
        OPEN,
        ("greedy answer",),
    ),
)


def _index() -> tuple[dict[str, Term], dict[str, Term]]:
    """Every spelling -> its Term, exactly and case-folded (the first declared wins)."""
    exact: dict[str, Term] = {}
    folded: dict[str, Term] = {}
    for term in TERMS:
        for spelling in term.spellings:
            exact.setdefault(spelling, term)
            folded.setdefault(spelling.casefold(), term)
    return exact, folded


def lookup(word: str) -> Term | None:
    """The Term a page's word names (see the module docstring), or None."""
    exact, folded = _index()
    found = exact.get(word) or folded.get(word.casefold())
    if found is None:
        for suffix in (THETA_ONLY, ADAPTER_ONLY):  # "scalar_theta_only", "CALM with one temperature, adapter only"
            if word.endswith(suffix) and lookup(word.removesuffix(suffix)):
                return exact["adapter only"]
    return found


def define(word: str) -> str:
    """The definition of `word`. A page asking for a word with no entry fails here, loudly:
    every word a page defines must be in the glossary."""
    term = lookup(word)
    if term is None:
        raise KeyError(f"Expected a glossary entry for {word!r} (calm_core/glossary.py), but there is none")
    return term.definition


def tooltip(*words: str) -> str:
    """The definitions of `words` as a help tooltip, one Markdown paragraph each, headed by
    the word as the page shows it."""
    return "\n\n".join(f"**{word}**: {define(word)}" for word in dict.fromkeys(words))


def line(*words: str) -> str:
    """The definitions of `words` in one line for a caption: "ECE: ... · NLL: ..."."""
    return " · ".join(f"{word}: {define(word)}" for word in dict.fromkeys(words))


HEADER = (
    "# Glossary\n\n"
    "The words of CALM Studio in plain language. The studio's help tooltips and captions come from the same "
    "declaration, `calm_core/glossary.py`; this file is generated from it by "
    "`python -m calm_core.glossary` (edit the declaration, then run that command; "
    "`tests/test_glossary.py` fails when the two differ).\n"
)


def markdown() -> str:
    """docs/glossary.md: a section per group, a line per term with its other spellings."""
    parts = [HEADER]
    for group in GROUPS:
        parts.append(f"\n## {group}\n")
        for term in (t for t in TERMS if t.group == group):
            also = f" ({', '.join(f'`{s}`' for s in term.also)})" if term.also else ""
            parts.append(f"- **{term.name}**{also}: {term.definition}")
    return "\n".join(parts) + "\n"


DOC_PATH = Path(__file__).resolve().parent.parent / "docs" / "glossary.md"


def main(argv: list[str] | None = None) -> int:
    """Write docs/glossary.md from TERMS (`--check`: say whether it is up to date, exit 1 if not)."""
    parser = argparse.ArgumentParser(prog="python -m calm_core.glossary", description=main.__doc__)
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    parser.add_argument("--out", type=Path, default=DOC_PATH, help="where the Markdown goes")
    args = parser.parse_args(argv)
    text = markdown()
    if args.check:
        current = args.out.read_text(encoding="utf-8") if args.out.is_file() else ""
        print(f"{args.out}: {'up to date' if current == text else 'out of date: run python -m calm_core.glossary'}")
        return 0 if current == text else 1
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out} ({len(TERMS)} terms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
