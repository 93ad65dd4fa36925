"""``python -m app serve`` flags over the YAML, a copy-pasted ``vllm serve`` line, and the GPU-memory check."""

from __future__ import annotations

import pytest

from app.cli_serve import load_serve_config, parse_ice_servers, parse_serve_args
from app.config import ConfigError, load_deploy_config


def _cfg(argv: list[str], env: dict[str, str] | None = None):
    return load_serve_config(parse_serve_args(argv), env or {})


def test_flags_override_the_yaml():
    cfg, notes = _cfg(["--api-key", "k1", "--api-key", "k2", "k3", "--served-model-name", "omni", "alias",
                       "--allowed-local-media-path", "/srv/media", "--max-sessions", "2", "--disconnect-grace-s", "5",
                       "--ssl-keyfile", "k.pem", "--ssl-certfile", "c.pem", "--ice-servers", "stun:stun.example:3478",
                       "--host", "127.0.0.1", "--port", "9000", "--public-page", "--max-sessions-per-client", "1",
                       "--max-session-s", "600"])
    s = cfg.server
    assert s.api_keys == ("k1", "k2", "k3") and s.public_page and not s.metrics_require_key
    assert (s.served_model_name, s.served_model_aliases) == ("omni", ["alias"])
    assert (s.host, s.port, s.ssl_keyfile, s.ssl_certfile) == ("127.0.0.1", 9000, "k.pem", "c.pem")
    assert s.ice_servers == [{"urls": "stun:stun.example:3478"}]
    d = cfg.duplex_session
    assert (d.max_sessions, d.disconnect_grace_s, d.max_sessions_per_client, d.max_session_s) == (2, 5.0, 1, 600.0)
    assert cfg.limits.allowed_local_media_path == "/srv/media"
    assert notes == []
    # nothing given: the YAML's values stand
    base, _ = _cfg([])
    assert base.server == load_deploy_config().server and base.duplex_session.max_sessions == 4


def test_api_key_precedence_flag_then_env_then_yaml(tmp_path):
    assert _cfg([], {"OMNI_API_KEY": "e1, e2"})[0].server.api_keys == ("e1", "e2")
    assert _cfg(["--api-key", "f"], {"OMNI_API_KEY": "e1"})[0].server.api_keys == ("f",)
    overlay = tmp_path / "keyed.yaml"
    overlay.write_text(f"base_config: {load_deploy_config.__globals__['DEFAULT_CONFIG_PATH']}\nserver:\n  api_key: y\n")
    assert _cfg(["--deploy-config", str(overlay)])[0].server.api_keys == ("y",)
    assert _cfg(["--deploy-config", str(overlay)], {"OMNI_API_KEY": "e"})[0].server.api_keys == ("e",)


def test_a_copy_pasted_vllm_serve_line_works(monkeypatch):
    argv = ["/models/MiniCPM-o-4_5", "--omni", "--deploy-config", "vllm_omni/deploy/minicpmo_4_5_2gpu.yaml",
            "--trust-remote-code", "--host", "0.0.0.0", "--port", "8091"]
    cfg, notes = _cfg(argv)
    assert cfg.model_family == "vllm_omni" and cfg.trust_remote_code is True
    assert (cfg.server.host, cfg.server.port) == ("0.0.0.0", 8091)
    assert cfg.server.served_model_name == "/models/MiniCPM-o-4_5"  # vLLM's default served name is MODEL
    assert cfg.stage(1).devices == "1"  # the repository's copy of vLLM-Omni's 2-GPU preset
    assert any("configs/minicpmo_4_5_2gpu.yaml" in n for n in notes)
    assert cfg.model == "/models/MiniCPM-o-4_5"  # the in-process engine's model directory (config model:)
    # a remote config: MODEL is the remote's model name
    cfg, _ = _cfg(["openbmb/MiniCPM-o-4_5", "--deploy-config", "configs/remote.yaml"])
    assert cfg.remote.model == "openbmb/MiniCPM-o-4_5"


def test_tiny_refuses_a_model_path_and_says_what_to_do():
    with pytest.raises(ValueError, match="embedded models.*--served-model-name.*minicpmo_4_5.yaml"):
        _cfg(["openbmb/MiniCPM-o-4_5"])
    assert _cfg(["tiny-omni"])[0].model_family == "tiny"  # its own served name is fine


@pytest.mark.parametrize(("flag", "hint"), [
    (["--tensor-parallel-size", "2"], "tensor_parallel_size"),
    (["--gpu-memory-utilization=0.5"], "gpu_memory_utilization"),
    (["--max-model-len", "4096"], "max_model_len"),
    (["--dtype", "bfloat16"], "dtype:"),
    (["--stage-configs-path", "x.yaml"], "--deploy-config"),
    (["--no-such-flag"], "unknown flag --no-such-flag"),
])
def test_vllm_only_flags_are_refused_with_what_to_use(flag, hint, capsys):
    with pytest.raises(SystemExit) as e:
        parse_serve_args(flag)
    assert e.value.code == 2
    assert hint in capsys.readouterr().err


def test_bad_flag_values_are_refused_with_the_field():
    with pytest.raises(ConfigError, match="max_sessions"):
        _cfg(["--max-sessions", "0"])
    with pytest.raises(ConfigError, match="ssl_keyfile and server.ssl_certfile go together"):
        _cfg(["--ssl-keyfile", "k.pem"])
    with pytest.raises(ValueError, match="stun:/turn:"):
        parse_ice_servers("http://example.org")
    turn = '[{"urls": ["turn:t.example:3478"], "username": "u", "credential": "c"}]'
    assert parse_ice_servers(turn)[0]["username"] == "u"


def test_gpu_memory_over_one_device_is_refused_naming_the_stages():
    with pytest.raises(ConfigError) as e:
        load_deploy_config("configs/minicpmo_4_5.yaml", '{"0": {"gpu_memory_utilization": 0.9}}')
    msg = str(e.value)
    assert "device 0 sums to 1.23" in msg
    assert "stage 0 (thinker) 0.9" in msg and "stage 1 (talker) 0.15" in msg and "stage 2 (code2wav) 0.18" in msg
    # the presets themselves fit (2 GPUs: 0.55 + 0.35 on GPU 1)
    for name in ("minicpmo_4_5", "minicpmo_4_5_2gpu", "minicpmo_4_5_3gpu", "minicpmo_4_5_8x4090"):
        load_deploy_config(f"configs/{name}.yaml")
    # a tensor-parallel stage counts on each of its devices
    with pytest.raises(ConfigError, match="device 4 sums to 1.75"):
        load_deploy_config("configs/minicpmo_4_5_8x4090.yaml", '{"1": {"devices": "3,4"}, "0": {"devices": "0,1,2,4"}}')


def test_ice_servers_reach_the_page_and_aiortc_and_default_to_none():
    from app.server import build_app

    turn = [{"urls": "turn:turn.example:3478", "username": "u", "credential": "c"}]
    cfg, _ = _cfg(["--ice-servers", __import__("json").dumps(turn)])
    blocks = build_app(cfg, with_ui=True).state.ui["blocks"]
    rtcs = [c for c in blocks.config["components"] if c.get("type") == "webrtc"]
    assert len(rtcs) == 2
    for c in rtcs:
        assert c["props"]["rtc_configuration"] == {"iceServers": turn}
        server_side = c["props"]["server_rtc_configuration"]["iceServers"]  # (aiortc's RTCConfiguration, as a dict)
        assert [{k: s[k] for k in turn[0]} for s in server_side] == turn
    plain = build_app(_cfg([])[0], with_ui=True).state.ui["blocks"]
    for c in (c for c in plain.config["components"] if c.get("type") == "webrtc"):
        assert c["props"].get("rtc_configuration") is None  # nothing leaves the host unless configured
        assert c["props"]["server_rtc_configuration"]["iceServers"] == []
