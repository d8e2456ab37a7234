"""Files copied into every `calm export` folder (calm_core.export.folder). `calm_head.py` is a
stand-alone module: it imports torch, safetensors and transformers only, never calm_core,
so an export loads where CALM Studio is not installed."""
