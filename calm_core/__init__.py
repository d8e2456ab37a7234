"""calm_core: the CALM Studio library. No Streamlit import anywhere in this package.

Layers, each importing only the ones below it (docs/architecture.md draws them,
tests/test_architecture.py checks them):

    cli/                       the `calm` command
    export/ launch             exports (folder, merged, card); launching and resuming runs
    access/ estimate/ results/ who may do what; time estimates; runs read as tables, reports, the verdict
    training/                  the loop, its config, tasks/, methods/, the bilevel step, objectives
    generative/                open-ended QA: sampling, answer matching, semantic confidence
    scoring/                   models and adapters, prompts, the forward pass, option scores, evaluation
    data/ runs/ calibration/   items and datasets; run directories and jobs; the head, post-hoc, metrics
    io, paths, settings, registry, faults, provenance, glossary, logs
"""

from calm_core.logs import quiet_third_party

__version__ = "0.1.0"

quiet_third_party()  # before any submodule imports bitsandbytes (calm_core/logs.py says why)
