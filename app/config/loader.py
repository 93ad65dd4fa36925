"""Load a deploy YAML: ``base_config`` overlays, platform overlays, ``--stage-overrides``, validation.

Merge rules follow vLLM-Omni's ``resolve_deploy_yaml`` / ``_apply_platform_overrides``
(``vllm_omni/config/stage_config.py``):

* ``base_config: <path>`` (relative to the overlaying file) is loaded first, recursively; the
  overlay's top-level scalars win; ``connectors`` are merged recursively; ``stages`` and
  ``platforms.<name>.stages`` are merged entry by entry on ``stage_id``, where
  ``default_sampling_params`` (and the other sampling / extras mappings) merge key by key and any
  other stage key is replaced. Our own sections (``duplex_session``, ``server``, ``limits``,
  ``turn_policy``, ``ui``, ``remote``) merge recursively (vLLM-Omni replaces ``duplex_session``
  whole; the difference only shows when both files set it).
* ``platforms`` is stored; its stage overlay is applied only when a ``platform`` is named
  (the app runs the tiny family on CPU, where nothing applies).
* ``--stage-overrides`` JSON, keyed by stage id, is merged recursively over that stage last.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from app.config.errors import ConfigError, validation_problems
from app.config.schema import DeployConfig, known_keys

REPO_ROOT = Path(__file__).resolve().parents[2]
CONFIGS_DIR = REPO_ROOT / "configs"
DEFAULT_CONFIG_PATH = CONFIGS_DIR / "tiny.yaml"
"""The config used when no path is given."""

OVERRIDES_SOURCE = "--stage-overrides"

_STAGE_DEEP_MERGE_KEYS = frozenset(
    {"default_sampling_params", "default_pooling_params", "subtalker_sampling_params", "engine_extras", "engine_args"}
)
_RECURSIVE_SECTIONS = frozenset({"connectors", "duplex_session", "server", "limits", "turn_policy", "ui", "remote"})


class _UniqueKeyLoader(yaml.SafeLoader):
    """``SafeLoader`` that refuses a mapping with the same key twice (PyYAML keeps the last)."""


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def deep_merge(base: Mapping[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    """Recursively merge ``update`` over ``base`` (new dict; mappings merge, anything else is replaced)."""
    merged = dict(base)
    for key, value in update.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def read_yaml(path: str | Path) -> dict[str, Any]:
    """Parse one YAML file into a mapping (an empty file is ``{}``).

    Raises:
        ConfigError: missing/unreadable file, YAML syntax error or duplicate key (with line and
            column), or a top level that is not a mapping.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read deploy config: {exc.strerror or exc}", source=path) from exc
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"invalid YAML: {where}{problem}", source=path) from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"top level must be a mapping, got {type(data).__name__}", source=path)
    return data


def _stage_list(value: Any, where: str, source: str | Path) -> list[dict[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ConfigError(f"{where}: must be a list of stage mappings", source=source)
    for i, stage in enumerate(value):
        if not isinstance(stage, dict) or not isinstance(stage.get("stage_id"), int):
            raise ConfigError(f"{where}[{i}]: each stage must be a mapping with an integer stage_id", source=source)
    return value


def _merge_stage_lists(base: Any, overlay: Any, where: str, source: str | Path) -> list[dict[str, Any]]:
    by_id = {s["stage_id"]: s for s in _stage_list(base, where, source)}
    for stage in _stage_list(overlay, where, source):
        old = by_id.get(stage["stage_id"])
        if old is None:
            by_id[stage["stage_id"]] = stage
            continue
        merged = {**old, **stage}
        for key in _STAGE_DEEP_MERGE_KEYS:
            if isinstance(old.get(key), Mapping) and isinstance(stage.get(key), Mapping):
                merged[key] = deep_merge(old[key], stage[key])
        by_id[stage["stage_id"]] = merged
    return list(by_id.values())


def merge_overlay(base: Mapping[str, Any], overlay: Mapping[str, Any], source: str | Path = "") -> dict[str, Any]:
    """Merge one deploy document over another with vLLM-Omni's ``base_config`` rules (module doc)."""
    merged = {**base, **{k: v for k, v in overlay.items() if k not in ("stages", "platforms")}}
    for key in _RECURSIVE_SECTIONS:
        if isinstance(base.get(key), Mapping) and isinstance(overlay.get(key), Mapping):
            merged[key] = deep_merge(base[key], overlay[key])
    if "stages" in base or "stages" in overlay:
        merged["stages"] = _merge_stage_lists(base.get("stages"), overlay.get("stages"), "stages", source)
    if base.get("platforms") or overlay.get("platforms"):
        plats: dict[str, Any] = {}
        bp_all, op_all = base.get("platforms") or {}, overlay.get("platforms") or {}
        for name in [*bp_all, *(n for n in op_all if n not in bp_all)]:
            bp, op = bp_all.get(name) or {}, op_all.get(name) or {}
            plat = {**bp, **{k: v for k, v in op.items() if k != "stages"}}
            plat["stages"] = _merge_stage_lists(
                bp.get("stages"), op.get("stages"), f"platforms.{name}.stages", source
            )
            plats[name] = plat
        merged["platforms"] = plats
    return merged


def resolve_yaml(path: str | Path, _chain: tuple[Path, ...] = ()) -> dict[str, Any]:
    """Read ``path`` and, recursively, the ``base_config`` it names; return the merged document.

    The result keeps the top file's ``base_config`` value (for the record; it is not re-applied).

    Raises:
        ConfigError: any :func:`read_yaml` error, a non-string ``base_config``, or a cycle.
    """
    real = Path(path).resolve()
    if real in _chain:
        cycle = " -> ".join(str(p) for p in (*_chain, real))
        raise ConfigError(f"base_config cycle: {cycle}", source=path)
    data = read_yaml(path)
    base_ref = data.get("base_config")
    if base_ref is None:
        return data
    if not isinstance(base_ref, str) or not base_ref:
        raise ConfigError("base_config: must be a file path relative to this file", source=path)
    base_path = Path(path).parent / base_ref
    base = resolve_yaml(base_path, (*_chain, real))
    base.pop("base_config", None)
    return merge_overlay(base, data, source=path)


def parse_stage_overrides(value: str | Mapping[Any, Any] | None) -> dict[int, dict[str, Any]]:
    """Parse ``--stage-overrides`` (JSON text or a mapping) into ``{stage_id: {key: value}}``.

    Example: ``'{"0": {"max_num_seqs": 2}, "2": {"enforce_eager": true}}'``.

    Raises:
        ConfigError: bad JSON, a non-object top level, a key that is not a stage id, a value that
            is not an object, or a ``stage_id`` inside that differs from its key.
    """
    if value is None:
        return {}
    if isinstance(value, str):
        if not value.strip():
            return {}
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"invalid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})",
                              source=OVERRIDES_SOURCE) from exc
    if not isinstance(value, Mapping):
        raise ConfigError(
            f"must be a JSON object keyed by stage id, e.g. '{{\"0\": {{\"max_num_seqs\": 2}}}}'; "
            f"got {type(value).__name__}",
            source=OVERRIDES_SOURCE,
        )
    out: dict[int, dict[str, Any]] = {}
    for key, stage in value.items():
        sid = key if isinstance(key, int) and not isinstance(key, bool) else None
        if isinstance(key, str) and key.strip().lstrip("-").isdigit():
            sid = int(key)
        if sid is None:
            raise ConfigError(f"{key!r}: keys must be stage ids (\"0\", \"1\", \"2\")", source=OVERRIDES_SOURCE)
        if not isinstance(stage, Mapping):
            raise ConfigError(f"{key}: override must be a JSON object, got {type(stage).__name__}",
                              source=OVERRIDES_SOURCE)
        if "stage_id" in stage and stage["stage_id"] != sid:
            raise ConfigError(f"{key}.stage_id: cannot change a stage's id", source=OVERRIDES_SOURCE)
        out[sid] = dict(stage)
    return out


def apply_stage_overrides(data: Mapping[str, Any], overrides: Mapping[int, Mapping[str, Any]]) -> dict[str, Any]:
    """Merge parsed stage overrides recursively over the matching ``stages[]`` entries.

    Raises:
        ConfigError: an override names a stage id the document does not have.
    """
    if not overrides:
        return dict(data)
    stages = [dict(s) if isinstance(s, Mapping) else s for s in data.get("stages") or []]
    ids = {s.get("stage_id"): i for i, s in enumerate(stages) if isinstance(s, dict)}
    for sid, patch in overrides.items():
        if sid not in ids:
            raise ConfigError(f"{sid}: unknown stage id (stages: {sorted(k for k in ids if k is not None)})",
                              source=OVERRIDES_SOURCE)
        stages[ids[sid]] = deep_merge(stages[ids[sid]], patch)
    return {**data, "stages": stages}


def apply_platform(data: Mapping[str, Any], platform: str | None) -> dict[str, Any]:
    """Apply ``platforms.<platform>`` (stage overlays, ``model_runner``) like vLLM-Omni does on that device.

    ``None`` or a platform the document does not list leaves the document unchanged. Stage entries
    naming an unknown stage id are skipped (as in vLLM-Omni).
    """
    section = (data.get("platforms") or {}).get(platform) if platform else None
    if not isinstance(section, Mapping):
        return dict(data)
    out = dict(data)
    if "model_runner" in section:
        out["model_runner"] = section["model_runner"]
    stages = [dict(s) for s in data.get("stages") or []]
    by_id = {s.get("stage_id"): s for s in stages}
    for patch in section.get("stages") or []:
        stage = by_id.get(patch.get("stage_id"))
        if stage is None:
            continue
        flat = {k: v for k, v in patch.items() if k not in ("stage_id", "engine_args", "runtime")}
        flat.update(patch.get("engine_args") or {})
        flat.update(patch.get("runtime") or {})
        for key, value in flat.items():
            if key in (*_STAGE_DEEP_MERGE_KEYS, "env") and isinstance(value, Mapping) \
                    and isinstance(stage.get(key), Mapping):
                stage[key] = {**stage[key], **value}
            else:
                stage[key] = value
    out["stages"] = stages
    return out


def parse_deploy_config(
    data: Mapping[str, Any],
    *,
    stage_overrides: str | Mapping[Any, Any] | None = None,
    platform: str | None = None,
    source: str | Path | None = None,
) -> DeployConfig:
    """Validate an already-merged deploy document (platform overlay, then stage overrides, then schema).

    Raises:
        ConfigError: any override or schema problem, each line naming its field path.
    """
    doc = apply_platform(data, platform)
    parsed = parse_stage_overrides(stage_overrides)
    doc = apply_stage_overrides(doc, parsed)
    label = None if source is None else str(source)
    if parsed:
        label = f"{label} + {OVERRIDES_SOURCE}" if label else OVERRIDES_SOURCE
    try:
        return DeployConfig.model_validate(doc)
    except ValidationError as exc:
        raise ConfigError(validation_problems(exc, known_keys()), source=label) from None


def load_deploy_config(
    path: str | Path | None = None,
    stage_overrides: str | Mapping[Any, Any] | None = None,
    *,
    platform: str | None = None,
) -> DeployConfig:
    """Load, merge and validate a deploy config.

    Args:
        path: the YAML file; ``None`` = ``configs/tiny.yaml`` of this repository.
        stage_overrides: ``--stage-overrides`` JSON text or mapping keyed by stage id, merged
            recursively over that stage, e.g. ``'{"0": {"max_num_seqs": 2}}'``.
        platform: apply ``platforms.<platform>`` (``"cuda"``, ``"npu"``); ``None`` (CPU) = no.

    Returns:
        The frozen, validated :class:`DeployConfig`.

    Raises:
        ConfigError: unreadable file, bad YAML, ``base_config`` problem, bad overrides, or schema
            violations; the message names the file and the field path(s).
    """
    source = Path(path) if path is not None else DEFAULT_CONFIG_PATH
    document = resolve_yaml(source)
    return parse_deploy_config(document, stage_overrides=stage_overrides, platform=platform, source=source)
