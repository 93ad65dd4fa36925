"""Deploy config: schema defaults and validation, loader merges and errors, presets vs vLLM-Omni's YAMLs.

Mirrors vLLM-Omni's ``tests/engine/duplex/test_duplex_deploy_config.py`` (defaults, frozen,
positive; max_sessions 4 / 1 / 4 for base, 8x4090, 3gpu stage-1 replicas) and checks our presets
against the YAMLs inside the vLLM-Omni wheel (read straight from the zip, nothing installed).
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from app.config import (
    CONFIGS_DIR,
    DEFAULT_CONFIG_PATH,
    ConfigError,
    ConnectorsConfig,
    DeployConfig,
    DuplexSessionConfig,
    LimitsConfig,
    RemoteConfig,
    ServerConfig,
    StageConfig,
    TurnPolicyConfig,
    UIConfig,
    load_deploy_config,
    parse_deploy_config,
    parse_stage_overrides,
)
from app.constants import DEFAULT_CODEC_CHUNK_FRAMES, DEFAULT_CODEC_LEFT_CONTEXT_FRAMES

REPO = Path(__file__).resolve().parents[2]
VLLM_OMNI_VERSION = "0.30.0"
WHEEL_SETUP = f"pip download --no-deps vllm-omni=={VLLM_OMNI_VERSION} -d .cache/wheels"
MIB = 1024 * 1024


# ---------------------------------------------------------------- helpers


def _find_vllm_omni_wheel() -> Path | None:
    """The vLLM-Omni wheel: ``$VLLM_OMNI_WHEEL`` or ``.cache/wheels/vllm_omni-<ver>-*.whl``."""
    env = os.environ.get("VLLM_OMNI_WHEEL")
    if env:
        return Path(env) if Path(env).is_file() else None
    found = sorted((REPO / ".cache" / "wheels").glob(f"vllm_omni-{VLLM_OMNI_VERSION}-*.whl"))
    return found[-1] if found else None


@pytest.fixture(scope="session")
def vllm_omni_deploy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """vLLM-Omni's ``vllm_omni/deploy/*.yaml`` extracted from the wheel zip into a temp dir."""
    wheel = _find_vllm_omni_wheel()
    if wheel is None:
        pytest.skip(f"vLLM-Omni wheel not found; run `{WHEEL_SETUP}` (or set VLLM_OMNI_WHEEL)")
    out = tmp_path_factory.mktemp("vllm_omni_deploy")
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            if name.startswith("vllm_omni/deploy/") and name.endswith(".yaml"):
                (out / Path(name).name).write_bytes(zf.read(name))
    return out


def _tiny_doc() -> dict[str, Any]:
    return yaml.safe_load(DEFAULT_CONFIG_PATH.read_text())


def _err(doc: dict[str, Any], **kw: Any) -> str:
    with pytest.raises(ConfigError) as info:
        parse_deploy_config(doc, source="x.yaml", **kw)
    return str(info.value)


def _write(path: Path, doc: dict[str, Any] | str) -> Path:
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc))
    return path


# ---------------------------------------------------------------- defaults


def test_duplex_session_defaults_match_vllm_omni() -> None:
    d = DuplexSessionConfig()
    assert (d.max_sessions, d.idle_ttl_s, d.disconnect_grace_s, d.reaper_interval_s) == (4, 300, 30, 5)
    assert (d.resume_replay_ttl_s, d.resume_replay_max_bytes_per_session) == (60, 8388608)
    assert (d.max_pending_input_bytes_per_session, d.max_pending_turns_per_session) == (16777216, 4)
    assert d.completed_append_cache_size == 256
    assert (d.chunk_period_ms, d.max_message_bytes, d.inbox_size, d.output_buffer_events) == (1000, 4 * MIB, 256, 512)
    assert (d.context_watermark_ratio, d.max_frames_per_unit, d.max_context_tokens) == (0.85, 2, None)


def test_section_defaults() -> None:
    assert ServerConfig().model_dump() == {
        "host": "0.0.0.0", "port": 7860, "served_model_name": "tiny-omni", "served_model_aliases": [],
        "api_key": None, "public_page": False, "metrics_require_key": False, "ssl_keyfile": None,
        "ssl_certfile": None, "malloc_arena_max": 2, "ice_servers": []}
    assert ServerConfig().api_keys == () and ServerConfig(api_key="k").api_keys == ("k",)
    assert ServerConfig(api_key=["a", "b"]).api_keys == ("a", "b")
    lim = LimitsConfig()
    assert (lim.max_request_bytes, lim.max_image_bytes, lim.max_image_pixels) == (32 * MIB, 16 * MIB, 40_000_000)
    assert (lim.max_audio_seconds, lim.max_video_seconds, lim.max_video_frames, lim.max_messages) == (120, 60, 64, 64)
    assert (lim.allowed_local_media_path, lim.allow_remote_media, lim.remote_media_timeout_s) == (None, False, 10)
    tp = TurnPolicyConfig()
    assert (tp.vad_threshold, tp.end_of_turn_silence_ms, tp.min_speech_ms, tp.barge_in_ms) == (0.5, 500, 250, 300)
    assert tp.max_reply_tokens == 48
    assert (UIConfig().concurrency_limit, UIConfig().default_stack_frames) == (4, 1)
    c = ConnectorsConfig()
    assert (c.codec_chunk_frames, c.codec_left_context_frames) == (
        DEFAULT_CODEC_CHUNK_FRAMES,
        DEFAULT_CODEC_LEFT_CONTEXT_FRAMES,
    )
    s = StageConfig(stage_id=1)
    assert (s.max_num_seqs, s.inbox_size, s.num_replicas, s.devices, s.name) == (4, 64, 1, None, "talker")
    assert s.default_sampling_params.as_dict() == {}
    assert RemoteConfig(url="http://h:8091/").url == "http://h:8091"


def test_default_config_is_tiny() -> None:
    cfg = load_deploy_config()
    assert isinstance(cfg, DeployConfig)
    assert (cfg.model_family, cfg.session_mode, cfg.async_chunk, cfg.active_stream_window) == ("tiny", "duplex", True, 4)
    assert [s.stage_id for s in cfg.stages] == [0, 1, 2]
    assert [s.max_num_seqs for s in cfg.stages] == [4, 4, 4]
    assert cfg.duplex_session.max_sessions == 4 and cfg.duplex_session.chunk_period_ms == 1000
    sp = cfg.thinker.default_sampling_params
    assert (sp.temperature, sp.max_tokens) == (0.0, 48)
    assert cfg.stage(2) is cfg.code2wav and cfg.remote is None
    assert cfg == load_deploy_config(DEFAULT_CONFIG_PATH)
    with pytest.raises(KeyError):
        cfg.stage(3)


def test_built_from_python_objects() -> None:
    cfg = DeployConfig(stages=[StageConfig(stage_id=i, max_num_seqs=2 if i == 0 else 4) for i in (2, 1, 0)])
    assert [s.stage_id for s in cfg.stages] == [0, 1, 2]
    assert (cfg.model_family, cfg.duplex_session.max_sessions, cfg.active_stream_window) == ("tiny", 2, 2)
    updated = cfg.model_copy(update={"session_mode": "turn"})
    assert updated.session_mode == "turn" and cfg.session_mode == "duplex"


def test_frozen() -> None:
    cfg = load_deploy_config()
    with pytest.raises(ValidationError):
        cfg.model_family = "minicpmo"  # type: ignore[misc]
    with pytest.raises(ValidationError):
        cfg.duplex_session.max_sessions = 9  # type: ignore[misc]
    with pytest.raises(ValidationError):
        cfg.stage(0).max_num_seqs = 9  # type: ignore[misc]
    with pytest.raises(ValidationError):
        cfg.stage(0).default_sampling_params.temperature = 1.0  # type: ignore[misc]


def test_round_trip() -> None:
    for path in sorted(CONFIGS_DIR.glob("*.yaml")):
        cfg = load_deploy_config(path)
        assert DeployConfig.model_validate(cfg.model_dump()) == cfg


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("section", "key", "value", "path"),
    [
        ("duplex_session", "max_sessions", 0, "duplex_session.max_sessions"),
        ("duplex_session", "idle_ttl_s", 0, "duplex_session.idle_ttl_s"),
        ("duplex_session", "disconnect_grace_s", -1, "duplex_session.disconnect_grace_s"),
        ("duplex_session", "reaper_interval_s", 0, "duplex_session.reaper_interval_s"),
        ("duplex_session", "resume_replay_ttl_s", 0, "duplex_session.resume_replay_ttl_s"),
        ("duplex_session", "resume_replay_max_bytes_per_session", 0, "duplex_session.resume_replay_max_bytes_per_session"),
        ("duplex_session", "max_pending_input_bytes_per_session", 0, "duplex_session.max_pending_input_bytes_per_session"),
        ("duplex_session", "max_pending_turns_per_session", 0, "duplex_session.max_pending_turns_per_session"),
        ("duplex_session", "completed_append_cache_size", 0, "duplex_session.completed_append_cache_size"),
        ("duplex_session", "max_message_bytes", 0, "duplex_session.max_message_bytes"),
        ("duplex_session", "inbox_size", 0, "duplex_session.inbox_size"),
        ("duplex_session", "output_buffer_events", -5, "duplex_session.output_buffer_events"),
        ("duplex_session", "context_watermark_ratio", 1.5, "duplex_session.context_watermark_ratio"),
        ("duplex_session", "max_frames_per_unit", 0, "duplex_session.max_frames_per_unit"),
        ("duplex_session", "max_context_tokens", 0, "duplex_session.max_context_tokens"),
        ("server", "port", 0, "server.port"),
        ("server", "port", 70000, "server.port"),
        ("limits", "max_request_bytes", 0, "limits.max_request_bytes"),
        ("limits", "max_audio_seconds", 0, "limits.max_audio_seconds"),
        ("limits", "remote_media_timeout_s", 0, "limits.remote_media_timeout_s"),
        ("turn_policy", "vad_threshold", 1.0, "turn_policy.vad_threshold"),
        ("turn_policy", "max_reply_tokens", 0, "turn_policy.max_reply_tokens"),
        ("ui", "concurrency_limit", 0, "ui.concurrency_limit"),
        ("ui", "concurrency_limit", 1.5, "ui.concurrency_limit"),
        ("ui", "concurrency_limit", "4", "ui.concurrency_limit"),
        ("ui", "concurrency_limit", True, "ui.concurrency_limit"),
        ("ui", "default_stack_frames", 0, "ui.default_stack_frames"),
        ("connectors", "codec_chunk_frames", 0, "connectors.codec_chunk_frames"),
        ("connectors", "codec_left_context_frames", -1, "connectors.codec_left_context_frames"),
    ],
)
def test_section_value_rejected_names_field(section: str, key: str, value: Any, path: str) -> None:
    doc = _tiny_doc()
    doc[section] = {**doc.get(section, {}), key: value}
    msg = _err(doc)
    assert msg.startswith("x.yaml: ") and f"{path}: " in msg


@pytest.mark.parametrize(
    ("key", "value", "path"),
    [
        ("max_num_seqs", 0, "stages[1].max_num_seqs: Input should be greater than 0"),
        ("max_num_seqs", "2", "stages[1].max_num_seqs: Input should be a valid integer"),
        ("inbox_size", 0, "stages[1].inbox_size"),
        ("gpu_memory_utilization", 1.2, "stages[1].gpu_memory_utilization"),
        ("tensor_parallel_size", 0, "stages[1].tensor_parallel_size"),
        ("max_model_len", -1, "stages[1].max_model_len"),
        ("num_replicas", 0, "stages[1].num_replicas"),
        ("default_sampling_params", {"temperature": -0.1}, "stages[1].default_sampling_params.temperature"),
        ("default_sampling_params", {"top_p": 0}, "stages[1].default_sampling_params.top_p"),
        ("default_sampling_params", {"max_tokens": 0}, "stages[1].default_sampling_params.max_tokens"),
        ("default_sampling_params", {"min_tokens": 9, "max_tokens": 2}, "min_tokens (9) exceeds max_tokens (2)"),
        ("max_num_seq", 2, "stages[1].max_num_seq: unknown stage key for model_family 'tiny'; did you mean 'max_num_seqs'?"),
    ],
)
def test_stage_value_rejected_names_field(key: str, value: Any, path: str) -> None:
    doc = _tiny_doc()
    doc["stages"][1][key] = value
    assert path in _err(doc)


def test_chunk_period_must_be_allowed_unit() -> None:
    doc = _tiny_doc()
    doc["duplex_session"]["chunk_period_ms"] = 750
    assert "duplex_session.chunk_period_ms: must be one of [500, 1000] ms" in _err(doc)
    doc["duplex_session"]["chunk_period_ms"] = 500
    assert parse_deploy_config(doc).duplex_session.chunk_period_ms == 500


def test_idle_ttl_may_be_null() -> None:
    doc = _tiny_doc()
    doc["duplex_session"]["idle_ttl_s"] = None
    assert parse_deploy_config(doc).duplex_session.idle_ttl_s is None


@pytest.mark.parametrize(
    ("section", "key", "expected"),
    [
        ("duplex_session", "max_sesions", "duplex_session.max_sesions: unknown key"),
        ("server", "prot", "server.prot: unknown key"),
        ("limits", "max_audio_secs", "limits.max_audio_secs: unknown key"),
        ("ui", "titel", "ui.titel: unknown key"),
        ("turn_policy", "vad", "turn_policy.vad: unknown key"),
        (None, "duplex_sesion", "duplex_sesion: unknown key"),
    ],
)
def test_unknown_keys_in_our_sections_rejected(section: str | None, key: str, expected: str) -> None:
    doc = _tiny_doc()
    if section is None:
        doc[key] = {}
    else:
        doc[section][key] = 1
    assert expected in _err(doc)


def test_did_you_mean_hint() -> None:
    doc = _tiny_doc()
    doc["duplex_session"]["max_sesions"] = 2
    assert "did you mean 'max_sessions'?" in _err(doc)


def test_vllm_omni_top_level_keys_stored() -> None:
    doc = _tiny_doc() | {
        "trust_remote_code": True,
        "enable_prefix_caching": False,
        "base_config": "other.yaml",
        "model_runner": "v2",
        "platforms": {"cuda": {"stages": [{"stage_id": 1, "kv_cache_memory_bytes": 2147483648}]}},
    }
    cfg = parse_deploy_config(doc)
    assert (cfg.trust_remote_code, cfg.enable_prefix_caching, cfg.base_config, cfg.model_runner) == (
        True, False, "other.yaml", "v2",
    )
    assert cfg.platforms is not None and cfg.stage(1).kv_cache_memory_bytes is None  # stored, not applied
    assert "stage_args: removed vLLM-Omni schema" in _err(_tiny_doc() | {"stage_args": []})


def test_engine_keys_pass_through_for_engine_families() -> None:
    doc = _tiny_doc() | {"model_family": "vllm_omni"}
    doc["stages"][0]["hf_overrides"] = {"x": 1}
    doc["stages"][0]["default_sampling_params"]["ignore_eos"] = True
    cfg = parse_deploy_config(doc)
    assert cfg.stage(0).engine_extras == {"hf_overrides": {"x": 1}}
    assert cfg.stage(0).default_sampling_params.as_dict()["ignore_eos"] is True
    doc["model_family"] = "tiny"
    assert "stages[0].hf_overrides: unknown stage key for model_family 'tiny'" in _err(doc)


def test_stage_ids_must_be_0_1_2_and_are_sorted() -> None:
    doc = _tiny_doc()
    doc["stages"] = doc["stages"][:2]
    assert "stages: expected stage ids [0, 1, 2]" in _err(doc)
    doc = _tiny_doc()
    doc["stages"] = list(reversed(doc["stages"]))
    assert [s.stage_id for s in parse_deploy_config(doc).stages] == [0, 1, 2]
    doc["stages"][0]["stage_id"] = 0
    assert "stages: expected stage ids" in _err(doc)


def test_derived_capacity_and_family() -> None:
    doc = _tiny_doc()
    del doc["duplex_session"]["max_sessions"], doc["active_stream_window"], doc["model_family"]
    doc["stages"][1]["max_num_seqs"] = 2
    cfg = parse_deploy_config(doc)
    assert (cfg.duplex_session.max_sessions, cfg.active_stream_window, cfg.model_family) == (2, 2, "tiny")
    doc["pipeline"] = "minicpmo_4_5"
    assert parse_deploy_config(doc).model_family == "vllm_omni"


def test_connectors_lift_and_conflict() -> None:
    named = {"shm": {"name": "SharedMemoryConnector", "extra": {"codec_chunk_frames": 20, "codec_left_context_frames": 2}}}
    doc = _tiny_doc() | {"connectors": named, "model_family": "vllm_omni"}
    cfg = parse_deploy_config(doc)
    assert (cfg.connectors.codec_chunk_frames, cfg.connectors.codec_left_context_frames) == (20, 2)
    assert cfg.connectors.named == named
    doc["connectors"] = {**named, "codec_chunk_frames": 25}
    assert "connectors.codec_chunk_frames (25) disagrees" in _err(doc)
    doc["connectors"] = {"codec_chunk_frames": 3, "codec_left_context_frames": 3}
    assert "codec_left_context_frames (3) must be smaller" in _err(doc)
    doc["connectors"] = {"shm": {"extra": {}}}
    assert "connectors.shm: a named connector must be a mapping with a string 'name'" in _err(doc)
    doc["connectors"] = named
    doc["stages"][1]["output_connectors"] = {"to_stage_2": "nope"}
    assert "stages[1].output_connectors.to_stage_2: unknown connector 'nope'" in _err(doc)


def test_remote_url_validated() -> None:
    doc = _tiny_doc() | {"remote": {"url": "ftp://x"}}
    assert "remote.url: must be an http(s):// base URL" in _err(doc)
    doc["remote"] = {"url": "https://omni.example:8091", "timeout_s": 0}
    assert "remote.timeout_s" in _err(doc)


# ---------------------------------------------------------------- stage overrides


def test_stage_overrides_merge() -> None:
    cfg = load_deploy_config(stage_overrides='{"0": {"max_num_seqs": 2, "default_sampling_params": {"temperature": 0.7}}}')
    assert cfg.stage(0).max_num_seqs == 2
    sp = cfg.stage(0).default_sampling_params
    assert (sp.temperature, sp.max_tokens, sp.seed) == (0.7, 48, 42)  # deep-merged, siblings kept
    assert cfg.stage(1).max_num_seqs == 4
    assert load_deploy_config(stage_overrides={2: {"inbox_size": 8}}).stage(2).inbox_size == 8
    assert load_deploy_config(stage_overrides="") == load_deploy_config()


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ("{bad json", "--stage-overrides: invalid JSON"),
        ("[1, 2]", "--stage-overrides: must be a JSON object keyed by stage id"),
        ('{"7": {"max_num_seqs": 1}}', "--stage-overrides: 7: unknown stage id"),
        ('{"0": 5}', "--stage-overrides: 0: override must be a JSON object"),
        ('{"thinker": {}}', "--stage-overrides: 'thinker': keys must be stage ids"),
        ('{"0": {"stage_id": 1}}', "--stage-overrides: 0.stage_id: cannot change"),
        ('{"1": {"max_num_seqs": 0}}', "tiny.yaml + --stage-overrides: stages[1].max_num_seqs: Input should be greater than 0"),
    ],
)
def test_stage_override_errors(overrides: str, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_deploy_config(stage_overrides=overrides)
    assert expected in str(info.value)
    assert isinstance(info.value, ValueError)


def test_parse_stage_overrides() -> None:
    assert parse_stage_overrides('{"0":{"a":1},"2":{"b":{"c":2}}}') == {0: {"a": 1}, 2: {"b": {"c": 2}}}
    assert parse_stage_overrides(None) == {}


# ---------------------------------------------------------------- files, base_config, platforms


def test_base_config_overlay(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    _write(tmp_path / "base.yaml", _tiny_doc())
    overlay = {
        "base_config": "../base.yaml",
        "duplex_session": {"max_sessions": 2},
        "stages": [{"stage_id": 0, "max_num_seqs": 2, "default_sampling_params": {"temperature": 0.5}}],
    }
    cfg = load_deploy_config(_write(tmp_path / "sub" / "over.yaml", overlay))
    assert cfg.base_config == "../base.yaml"
    assert cfg.stage(0).max_num_seqs == 2 and cfg.stage(1).max_num_seqs == 4
    assert cfg.stage(0).default_sampling_params.temperature == 0.5
    assert cfg.stage(0).default_sampling_params.max_tokens == 48
    assert cfg.duplex_session.max_sessions == 2 and cfg.duplex_session.chunk_period_ms == 1000


def test_base_config_errors(tmp_path: Path) -> None:
    a = _write(tmp_path / "a.yaml", {"base_config": "b.yaml"})
    _write(tmp_path / "b.yaml", {"base_config": "a.yaml"})
    with pytest.raises(ConfigError, match="base_config cycle"):
        load_deploy_config(a)
    missing = _write(tmp_path / "m.yaml", {"base_config": "nowhere.yaml"})
    with pytest.raises(ConfigError, match=r"nowhere\.yaml: cannot read deploy config"):
        load_deploy_config(missing)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("stages: [\n  {stage_id: 0\n", "invalid YAML: line"),
        ("- 1\n- 2\n", "top level must be a mapping, got list"),
        ("server:\n  port: 1\nserver:\n  port: 2\n", "duplicate key 'server'"),
        ("", "stages: Field required"),
    ],
)
def test_bad_files(tmp_path: Path, text: str, expected: str) -> None:
    path = _write(tmp_path / "bad.yaml", text)
    with pytest.raises(ConfigError) as info:
        load_deploy_config(path)
    assert str(path) in str(info.value) and expected in str(info.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read deploy config"):
        load_deploy_config(tmp_path / "none.yaml")


def test_platform_overlay_applied_only_when_named() -> None:
    path = CONFIGS_DIR / "minicpmo_4_5.yaml"
    assert load_deploy_config(path).stage(1).kv_cache_memory_bytes is None
    cuda = load_deploy_config(path, platform="cuda")
    assert cuda.stage(1).kv_cache_memory_bytes == 2147483648
    npu = load_deploy_config(path, platform="npu")
    assert npu.stage(0).max_num_batched_tokens == 8192
    assert npu.stage(0).compilation_config == {"cudagraph_mode": "PIECEWISE"}
    assert npu.stage(2).additional_config == {"code2wav_enable_npu_graph": True, "code2wav_max_npu_graphs": 32}
    assert load_deploy_config(path, platform="rocm") == load_deploy_config(path)


# ---------------------------------------------------------------- presets

# (devices, gpu_memory_utilization, max_num_seqs) per stage, max_sessions: vLLM-Omni 0.30.0 deploy YAMLs.
PRESETS = {
    "minicpmo_4_5.yaml": ([("0", 0.55, 4), ("0", 0.15, 4), ("0", 0.18, 4)], 4),
    "minicpmo_4_5_2gpu.yaml": ([("0", 0.9, 4), ("1", 0.55, 4), ("1", 0.35, 4)], 4),
    "minicpmo_4_5_3gpu.yaml": ([("0", 0.9, 4), ("1", 0.9, 4), ("2", 0.9, 4)], 4),
    "minicpmo_4_5_8x4090.yaml": ([("0,1,2,3", 0.85, 1), ("4", 0.9, 1), ("5", 0.9, 1)], 1),
}


def test_every_preset_loads() -> None:
    names = sorted(p.name for p in CONFIGS_DIR.glob("*.yaml"))
    assert {"tiny.yaml", "remote.yaml", *PRESETS} <= set(names)
    for name in names:
        load_deploy_config(CONFIGS_DIR / name)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_placements(name: str) -> None:
    cfg = load_deploy_config(CONFIGS_DIR / name)
    layout, sessions = PRESETS[name]
    assert cfg.model_family == "vllm_omni" and cfg.pipeline == "minicpmo_4_5" and cfg.session_mode == "duplex"
    assert [(s.devices, s.gpu_memory_utilization, s.max_num_seqs) for s in cfg.stages] == layout
    assert cfg.duplex_session.max_sessions == sessions == cfg.active_stream_window == cfg.ui.concurrency_limit
    assert (cfg.connectors.codec_chunk_frames, cfg.connectors.codec_left_context_frames) == (25, 3)
    assert cfg.stage(1).default_sampling_params.as_dict() == {
        "temperature": 0.8, "top_p": 0.85, "top_k": 25, "repetition_penalty": 1.05,
        "min_tokens": 50, "max_tokens": 4096, "seed": 42, "detokenize": False,
    }
    assert cfg.stage(2).enforce_eager is True and cfg.stage(2).max_model_len == 65536


def test_8x4090_thinker() -> None:
    s0 = load_deploy_config(CONFIGS_DIR / "minicpmo_4_5_8x4090.yaml").stage(0)
    assert (s0.tensor_parallel_size, s0.max_model_len, s0.enforce_eager) == (4, 4096, True)


def test_remote_preset() -> None:
    cfg = load_deploy_config(CONFIGS_DIR / "remote.yaml")
    assert cfg.model_family == "vllm_omni" and cfg.remote is not None
    assert cfg.remote.url == "http://127.0.0.1:8091" and cfg.remote.timeout_s == 60
    assert cfg.duplex_session.max_sessions == 4


# ---------------------------------------------------------------- vLLM-Omni's own YAMLs (from the wheel)


@pytest.mark.parametrize(
    ("name", "sessions", "mode"),
    [
        ("minicpmo_4_5.yaml", 4, "duplex"),
        ("minicpmo_4_5_2gpu.yaml", 4, "duplex"),
        ("minicpmo_4_5_3gpu.yaml", 4, "duplex"),
        ("minicpmo_4_5_8x4090.yaml", 1, "duplex"),
        ("minicpmo_4_5_3gpu_stage1_replicas.yaml", 4, "duplex"),
        ("minicpmo_4_5_4gpu_stage1_replicas.yaml", 4, "duplex"),
        ("minicpmo_4_5_turn.yaml", 4, "turn"),
    ],
)
def test_vllm_omni_yaml_loads(vllm_omni_deploy: Path, name: str, sessions: int, mode: str) -> None:
    cfg = load_deploy_config(vllm_omni_deploy / name)
    assert cfg.model_family == "vllm_omni" and cfg.pipeline == "minicpmo_4_5"
    assert cfg.duplex_session.max_sessions == sessions and cfg.session_mode == mode


def test_vllm_omni_oversubscribed_experimental_profile_is_refused(vllm_omni_deploy: Path) -> None:
    """vLLM-Omni's "experimental validation profile" puts a Talker replica (0.8) on GPU 5 beside the
    base's Code2Wav (0.9): the per-device sum check refuses it, naming both stages."""
    with pytest.raises(ConfigError, match=r"device 5 sums to 1\.70.*stage 1 \(talker\) 0\.8.*stage 2 \(code2wav\) 0\.9"):
        load_deploy_config(vllm_omni_deploy / "minicpmo_4_5_8x4090_stage1_replicas.yaml")


def test_vllm_omni_replica_overlay(vllm_omni_deploy: Path) -> None:
    cfg = load_deploy_config(vllm_omni_deploy / "minicpmo_4_5_3gpu_stage1_replicas.yaml", platform="cuda")
    s1 = cfg.stage(1)
    assert (s1.devices, s1.num_replicas, s1.async_scheduling) == ("1,2", 2, False)
    assert s1.kv_cache_memory_bytes is None  # the overlay's null wins over the base's 2 GiB
    assert s1.default_sampling_params.temperature == 0.8  # inherited from the base


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_mirror_vllm_omni(vllm_omni_deploy: Path, name: str) -> None:
    ours = load_deploy_config(CONFIGS_DIR / name)
    theirs = load_deploy_config(vllm_omni_deploy / name)
    assert ours.stages == theirs.stages
    assert ours.connectors == theirs.connectors and ours.platforms == theirs.platforms
    assert ours.duplex_session.max_sessions == theirs.duplex_session.max_sessions
    for key in ("pipeline", "async_chunk", "session_mode", "trust_remote_code", "enable_prefix_caching"):
        assert getattr(ours, key) == getattr(theirs, key)


def test_schema_accepts_every_vllm_omni_top_level_key(vllm_omni_deploy: Path) -> None:
    """Each top-level / duplex_session key used by any vLLM-Omni deploy YAML is declared here."""
    top, session = set(), set()
    for path in vllm_omni_deploy.glob("*.yaml"):
        doc = yaml.safe_load(path.read_text()) or {}
        top |= set(doc)
        session |= set(doc.get("duplex_session") or {})
    assert top <= set(DeployConfig.model_fields), top - set(DeployConfig.model_fields)
    assert session <= set(DuplexSessionConfig.model_fields), session - set(DuplexSessionConfig.model_fields)

