"""Train: choose a model, data and method, see what it will cost, launch a background job.

The job is `calm train --run-dir DIR` in its own session (calm_core.launch): it goes on
when this tab closes. The Monitor page follows it.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app.state import describe_error
from calm_core.data.catalog import list_datasets
from calm_core.head import SCOPES
from calm_core.launch import estimate_step_seconds, launch_training
from calm_core.methods import METHODS
from calm_core.runs import list_runs
from calm_core.train_config import PRESETS, TrainConfig

DEFAULT_TRAIN = "builtin/chemical_symbols/train"
DEFAULT_HELDOUT = "builtin/chemical_symbols/validation"
DEFAULT_EVALS = ["builtin/chemical_symbols/test", "builtin/units/test", "builtin/animal_classes/test"]


def _index(options: list[str], wanted: str) -> int:
    return options.index(wanted) if wanted in options else 0


st.title("Train")
st.markdown("Fine-tune with **CALM** (LoRA + a calibration head, bilevel) or a baseline. "
            "The run is a background job: close the tab, it goes on; the **Monitor** page follows it.")

names = [e.name for e in list_datasets(kind="mc")]
st.subheader("1. Model")
model_kind = st.radio("Base model", ["embedded", "local directory", "hub id"], horizontal=True, key="train_model_kind",
                      help="embedded: SmolLM2-135M-Instruct, shipped with the studio. A hub id needs a connection.")
model = "embedded"
if model_kind != "embedded":
    model = st.text_input("Path or hub id", key="train_model_name",
                          placeholder="/models/my-llama" if model_kind == "local directory" else "HuggingFaceTB/SmolLM2-360M-Instruct")

st.subheader("2. Data")
c1, c2 = st.columns(2)
train_data = c1.selectbox("Training set S_T (labelled)", names, index=_index(names, DEFAULT_TRAIN), key="train_data")
heldout = c2.selectbox("Held-out S_V (entropy inputs; its labels fit TS)", names,
                       index=_index(names, DEFAULT_HELDOUT), key="train_heldout")
evals = st.multiselect("Evaluation sets (in domain and out of domain)", names,
                       default=[n for n in DEFAULT_EVALS if n in names], key="train_evals")

st.subheader("3. Method")
c1, c2, c3 = st.columns(3)
method = c1.selectbox("Method", sorted(METHODS), index=sorted(METHODS).index("calm"), key="train_method")
scope = c2.selectbox("Head scope", list(SCOPES), index=list(SCOPES).index("options"), key="train_scope",
                     help="vocab: (l, tau) per vocabulary id (the paper); options: per option position; scalar: one tau")
preset = c3.selectbox("Preset", sorted(PRESETS), index=sorted(PRESETS).index("quick"), key="train_preset",
                      help="quick: minutes on a laptop CPU (LoRA on the top 4 layers); paper: QLoRA r64, batch 16")
st.caption(METHODS[method].DESCRIPTION)

base = TrainConfig.preset(preset)
with st.expander("Advanced settings"):
    a1, a2, a3, a4 = st.columns(4)
    steps = a1.number_input("Steps", 1, 100_000, base.steps, key="train_steps")
    batch = a2.number_input("Batch size", 1, 512, base.batch_size, key="train_batch")
    inner = a3.number_input("Inner steps T", 1, 20, base.inner_steps, key="train_inner")
    eta = a4.number_input("eta", 0.01, 10.0, base.eta, key="train_eta")
    b1, b2, b3, b4 = st.columns(4)
    lr_theta = b1.number_input("lr theta", 1e-6, 1.0, base.lr_theta, format="%.0e", key="train_lr_theta")
    lr_alpha = b2.number_input("lr alpha", 1e-5, 1.0, base.lr_alpha, format="%.0e", key="train_lr_alpha")
    rank = b3.number_input("LoRA rank", 1, 256, base.lora.r, key="train_rank")
    layers = b4.number_input("LoRA on top N layers (0: all)", 0, 200, base.lora.layers or 0, key="train_layers")
    d1, d2, d3 = st.columns(3)
    four_bit = d1.selectbox("4-bit (QLoRA)", ["auto", "on", "off"], key="train_4bit",
                            help="auto: QLoRA on a GPU, LoRA on a CPU (recorded with the reason)")
    train_limit = d2.number_input("Training items (0: all)", 0, 1_000_000, 0, key="train_limit")
    eval_limit = d3.number_input("Items per evaluation set", 10, 100_000, base.eval_limit or 200, key="train_eval_limit")
    name = st.text_input("Run name", value="", key="train_name", help="letters, digits, - and _ ; used in the run id")

try:
    cfg = TrainConfig.preset(
        preset, model=model or "embedded", train_data=train_data, heldout_data=heldout, eval_data=tuple(evals),
        method=method, scope=scope, steps=int(steps), batch_size=int(batch), heldout_batch_size=int(batch),
        inner_steps=int(inner), eta=float(eta), lr_theta=float(lr_theta), lr_alpha=float(lr_alpha),
        train_limit=int(train_limit) or None, eval_limit=int(eval_limit), name=name or None,
        load_in_4bit={"auto": None, "on": True, "off": False}[four_bit],
        lora={**base.to_dict()["lora"], "r": int(rank), "layers": int(layers) or None})
except (ValueError, TypeError) as exc:
    st.error(describe_error(exc))
    st.stop()

st.subheader("4. Cost and launch")
seconds, source = estimate_step_seconds(cfg)
c1, c2 = st.columns(2)
c1.metric("Steps", cfg.steps)
if seconds is not None:
    c2.metric("Estimated time", f"{cfg.steps * seconds / 60:.1f} min", help=source)
    st.caption(f"At {seconds:.1f} s per step: {source}. Evaluation comes on top (a minute or two per 200 items).")
else:
    c2.metric("Estimated time", "unknown", help=source)
    st.caption(source)
if st.button("Launch training", type="primary", disabled=not evals, key="train_launch"):
    try:
        run, started = launch_training(cfg)
    except Exception as exc:
        st.error(describe_error(exc))
    else:
        st.session_state["monitor_run"] = run.run_id
        st.success(f"Run `{run.run_id}` " + ("started." if started else "queued: it starts when a job slot frees up."))
        st.page_link("pages/monitor.py", label="Follow it on the Monitor page", icon=":material/monitoring:")

st.subheader("Queue")
runs = list_runs()
if runs:
    st.dataframe(pd.DataFrame([{"run": r.run_id, "state": r.state, "step": f"{r.step or 0}/{r.total_steps or '?'}",
                                "method": r.method, "why": r.reason} for r in runs[:20]]), hide_index=True, width="stretch")
else:
    st.caption("No runs yet.")
