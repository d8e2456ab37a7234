"""calm_core: the CALM Studio library. No Streamlit import anywhere in this package.

Layers, each importing only the ones below it (docs/architecture.md draws them):

    cli/          the `calm` command
    workspace/    launch runs, read them as tables, reports, exports
    training/     the loop, its config, the bilevel step, methods, objectives, adapters
    generative/   open-ended QA: sampling, answer matching, semantic confidence
    scoring/      models, prompts, the forward pass, option scores, evaluation, playground
    calibration/  the CALM head, post-hoc calibrators, metrics
    data/  runs/  datasets and items; the run-directory protocol and jobs
    io, paths, faults, provenance
"""

__version__ = "0.1.0"
