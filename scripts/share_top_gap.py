"""Which term makes the frozen prefix's top-layer sharing gap (docs/performance.md,
"Fast paths are measured"): the logits or the LoRA gradients, in float32 and float64.

    .venv/bin/python scripts/share_top_gap.py            # the embedded model, float32
    .venv/bin/python scripts/share_top_gap.py --double   # the same in float64
"""

import sys

import torch
from peft import LoraConfig, get_peft_model

from calm_core.scoring import probes
from calm_core.scoring.frozen_prefix import FrozenPrefixModel
from calm_core.scoring.models import load_model

torch.manual_seed(0)
lm = load_model("embedded")
model = lm.model.double() if "--double" in sys.argv else lm.model
n = model.config.num_hidden_layers
split = n - 4
cfg = LoraConfig(
    r=8,
    lora_alpha=16,
    target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
    layers_to_transform=list(range(split, n)),
)
pm = get_peft_model(model, cfg)
with probes._eval_mode(pm), torch.inference_mode(False), torch.enable_grad(), probes._perturbed_adapter(pm):
    batch = probes._batch(pm)
    params = [p for p in pm.parameters() if p.requires_grad]
    own, og = probes._logits_and_grads(pm, batch, params)
    own2, og2 = probes._logits_and_grads(pm, batch, params)
    print("own vs own: logits", probes.relative_gap(own2, own), "grads", probes._grad_gap(og2, og))
    runner = FrozenPrefixModel(pm, split)
    for share in (True, False):
        runner.share_top = share
        f, fg = probes._logits_and_grads(runner, batch, params)
        print("share_top", share, "logits", probes.relative_gap(f, own), "grads", probes._grad_gap(fg, og))
    # double precision reference
