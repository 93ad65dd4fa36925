"""``python -m app serve``: the deploy YAML, overridden by vLLM-style flags; a ``vllm serve`` line works too.

``python -m app serve [MODEL] [--deploy-config FILE] [--stage-overrides JSON] [--host H] [--port P]
[--api-key KEY ...] [--served-model-name NAME ...] [--allowed-local-media-path DIR] [--max-sessions N]
[--disconnect-grace-s S] [--ssl-keyfile F --ssl-certfile F] [--ice-servers JSON|URLS] ...``

Precedence: a flag, then the environment (``OMNI_API_KEY``: one key or several, comma-separated),
then the YAML (``server.*``, ``duplex_session.*``, ``limits.*``), then the schema default.

A copy-pasted ``vllm serve MODEL --omni --deploy-config X --trust-remote-code --host H --port P``
line works: ``--omni`` is implied; ``--trust-remote-code`` is stored; ``MODEL`` is the model
directory of an in-process vLLM-Omni config (its ``model:``), the remote's model name of a
remote config, and for ``tiny`` must be its served name (it has embedded models); a vLLM
``--deploy-config vllm_omni/deploy/NAME.yaml`` path that does not exist here is read as
``configs/NAME.yaml``. Other vLLM engine flags are refused with the setting to use instead.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

API_KEY_ENV = "OMNI_API_KEY"

_STAGE_HINT = "per stage: --stage-overrides '{{\"0\": {{\"{key}\": {val}}}}}' (0 Thinker, 1 Talker, 2 Code2Wav)"
VLLM_ONLY_FLAGS: dict[str, str] = {
    "--tensor-parallel-size": _STAGE_HINT.format(key="tensor_parallel_size", val="2"),
    "-tp": _STAGE_HINT.format(key="tensor_parallel_size", val="2"),
    "--gpu-memory-utilization": _STAGE_HINT.format(key="gpu_memory_utilization", val="0.5"),
    "--max-model-len": _STAGE_HINT.format(key="max_model_len", val="8192"),
    "--max-num-seqs": _STAGE_HINT.format(key="max_num_seqs", val="4") + ", and --max-sessions",
    "--max-num-batched-tokens": _STAGE_HINT.format(key="max_num_batched_tokens", val="8192"),
    "--enforce-eager": _STAGE_HINT.format(key="enforce_eager", val="true"),
    "--kv-cache-memory-bytes": _STAGE_HINT.format(key="kv_cache_memory_bytes", val="4000000000"),
    "--dtype": "the deploy YAML's top-level 'dtype:'",
    "--quantization": "the deploy YAML's top-level 'quantization:'",
    "--data-parallel-size": "the deploy YAML's top-level 'data_parallel_size:'",
    "--pipeline-parallel-size": "the deploy YAML's top-level 'pipeline_parallel_size:'",
    "--stage-configs-path": "--deploy-config FILE",
    "--chat-template": "nothing: the model family owns its prompt format",
    "--uvicorn-log-level": "--log-level",
    "--root-path": "a reverse proxy's path rewrite (not supported here)",
}
"""vLLM engine flags this server does not take, and what to use instead."""


def build_parser() -> argparse.ArgumentParser:
    """The ``serve`` argument parser."""
    p = argparse.ArgumentParser(prog="python -m app serve", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", nargs="?", default=None,
                   help="vLLM's positional MODEL (see above); optional")
    p.add_argument("--model", dest="model_flag", default=None, help=argparse.SUPPRESS)
    p.add_argument("--deploy-config", default=None, help="deploy YAML (default configs/tiny.yaml)")
    p.add_argument("--stage-overrides", default=None, help='JSON keyed by stage id, e.g. \'{"0":{"max_num_seqs":2}}\'')
    p.add_argument("--host", default=None, help="bind address (server.host; default 0.0.0.0)")
    p.add_argument("--port", type=int, default=None, help="port (server.port; default 7860)")
    p.add_argument("--no-ui", action="store_true", help="API only, no browser page")
    p.add_argument("--log-level", default="info")
    p.add_argument("--record-dir", default=None,
                   help="record every duplex session into DIR (recording.dir; personal data; off by default; see README)")
    p.add_argument("--omni", action="store_true", help="accepted for vllm serve compatibility (always on)")
    p.add_argument("--trust-remote-code", action="store_true", default=None, help="stored as trust_remote_code")
    g = p.add_argument_group("access (server.*)")
    g.add_argument("--api-key", action="extend", nargs="+", default=None, metavar="KEY",
                   help=f"key(s) every /v1 route, the realtime socket and the page need (server.api_key; env {API_KEY_ENV})")
    g.add_argument("--public-page", action="store_true", default=None,
                   help="with a key: serve the page without one (server.public_page)")
    g.add_argument("--metrics-require-key", action="store_true", default=None,
                   help="with a key: /metrics needs it too (server.metrics_require_key)")
    g.add_argument("--served-model-name", nargs="+", default=None, metavar="NAME",
                   help="name(s) /v1/models lists and the routes accept (server.served_model_name + aliases)")
    g.add_argument("--ssl-keyfile", default=None, help="TLS key, PEM (server.ssl_keyfile)")
    g.add_argument("--ssl-certfile", default=None, help="TLS certificate, PEM (server.ssl_certfile)")
    g.add_argument("--ice-servers", default=None, metavar="JSON|URLS",
                   help='page STUN/TURN: a JSON list [{"urls": ..., "username": ..., "credential": ...}] or '
                        'comma-separated URLs (server.ice_servers; default none)')
    g.add_argument("--allowed-local-media-path", default=None, metavar="DIR",
                   help="directory file:// media may be read from (limits.allowed_local_media_path)")
    s = p.add_argument_group("sessions (duplex_session.*)")
    s.add_argument("--max-sessions", type=int, default=None, help="duplex_session.max_sessions")
    s.add_argument("--max-sessions-per-client", type=int, default=None,
                   help="sessions per key, or per client address with no key (duplex_session.max_sessions_per_client)")
    s.add_argument("--max-session-s", type=float, default=None, help="longest session, s (duplex_session.max_session_s)")
    s.add_argument("--disconnect-grace-s", type=float, default=None, help="duplex_session.disconnect_grace_s")
    return p


def parse_serve_args(argv: list[str]) -> argparse.Namespace:
    """Parse ``serve``'s arguments; vLLM-only flags exit with code 2 and what to use instead."""
    p = build_parser()
    args, unknown = p.parse_known_args(argv)
    if unknown:
        lines = []
        for tok in unknown:
            flag = tok.split("=", 1)[0]
            if flag in VLLM_ONLY_FLAGS:
                lines.append(f"{flag} is a vLLM engine flag; use {VLLM_ONLY_FLAGS[flag]}")
            elif flag.startswith("-"):
                lines.append(f"unknown flag {flag} (see python -m app serve --help)")
        p.error("; ".join(lines) if lines else f"unexpected arguments: {' '.join(unknown)}")
    if args.model_flag and args.model:
        p.error("give MODEL once (positional or --model)")
    args.model = args.model or args.model_flag
    return args


def _deploy_path(value: str | None) -> tuple[Path | None, str | None]:
    """The YAML to read, and a note when a vLLM package path was mapped onto ``configs/``."""
    from app.config import CONFIGS_DIR

    if value is None:
        return None, None
    path = Path(value)
    if not path.exists() and (CONFIGS_DIR / path.name).exists():
        return CONFIGS_DIR / path.name, f"note: {value} is not here; reading {CONFIGS_DIR / path.name}"
    return path, None


def parse_ice_servers(value: str) -> list[dict[str, Any]]:
    """``--ice-servers``: a JSON list of RTCIceServer objects, or comma-separated STUN/TURN URLs.

    Raises:
        ValueError: neither form.
    """
    value = value.strip()
    if value.startswith("["):
        servers = json.loads(value)
        if not isinstance(servers, list) or not all(isinstance(s, dict) for s in servers):
            raise ValueError("--ice-servers JSON must be a list of objects")
        return servers
    urls = [u.strip() for u in value.split(",") if u.strip()]
    if not all(u.startswith(("stun:", "turn:", "turns:")) for u in urls):
        raise ValueError(f"--ice-servers: expected stun:/turn:/turns: URLs or a JSON list, got {value!r}")
    return [{"urls": u} for u in urls]


def overrides_from_args(args: argparse.Namespace, env: dict[str, str], family: str) -> dict[str, Any]:
    """The deploy-document sections the flags (and ``OMNI_API_KEY``) set, to merge over the YAML.

    Raises:
        ValueError: a bad flag value or a MODEL the config's family cannot take (the message says why).
    """
    server: dict[str, Any] = {}
    keys = args.api_key or [k.strip() for k in env.get(API_KEY_ENV, "").split(",") if k.strip()]
    if keys:
        server["api_key"] = keys
    for flag in ("public_page", "metrics_require_key", "ssl_keyfile", "ssl_certfile", "host", "port"):
        if getattr(args, flag) is not None:
            server[flag] = getattr(args, flag)
    names = list(args.served_model_name or [])
    if args.model and family == "vllm_omni" and not names:
        names = [args.model]  # vLLM: the served name defaults to MODEL
    if names:
        server["served_model_name"], server["served_model_aliases"] = names[0], names[1:]
    if args.ice_servers is not None:
        server["ice_servers"] = parse_ice_servers(args.ice_servers)
    out: dict[str, Any] = {"server": server} if server else {}
    session = {k: getattr(args, k) for k in ("max_sessions", "max_sessions_per_client", "max_session_s",
                                            "disconnect_grace_s") if getattr(args, k) is not None}
    if session:
        out["duplex_session"] = session
    if args.allowed_local_media_path is not None:
        out["limits"] = {"allowed_local_media_path": args.allowed_local_media_path}
    if args.trust_remote_code:
        out["trust_remote_code"] = True
    if args.record_dir is not None:
        out["recording"] = {"dir": args.record_dir}
    return out


def load_serve_config(args: argparse.Namespace, env: dict[str, str] | None = None) -> tuple[Any, list[str]]:
    """The deploy config with the flags applied, and notes to print.

    Raises:
        ConfigError: the YAML or an overridden value is invalid (the field is named).
        ValueError: a flag value or MODEL is not usable (the message says what to do).
    """
    from app.config import (
        DEFAULT_CONFIG_PATH,
        deep_merge,
        parse_deploy_config,
        resolve_yaml,
    )

    env = dict(os.environ if env is None else env)
    path, note = _deploy_path(args.deploy_config)
    notes = [note] if note else []
    source = path or DEFAULT_CONFIG_PATH
    doc = resolve_yaml(source)
    base = parse_deploy_config(doc, source=source)  # the family decides what MODEL means
    family = base.model_family
    if args.model:
        if family == "tiny":
            if args.model not in (base.server.served_model_name, "tiny"):
                raise ValueError(
                    f"MODEL {args.model!r}: the 'tiny' family serves its embedded models and takes no model path. "
                    "Drop MODEL, rename with --served-model-name, or pick a MiniCPM-o config "
                    "(--deploy-config configs/minicpmo_4_5.yaml) or configs/remote.yaml.")
        elif base.remote is not None:
            doc = deep_merge(doc, {"remote": {"model": args.model}})
            notes.append(f"note: forwarding to the remote's model {args.model!r}")
        else:  # the in-process vLLM-Omni engine's model directory or id (the config's ``model:``)
            doc = deep_merge(doc, {"model": args.model})
    doc = deep_merge(doc, overrides_from_args(args, env, family))
    cfg = parse_deploy_config(doc, stage_overrides=args.stage_overrides, source=source)
    return cfg, notes


def serve(argv: list[str]) -> int:
    """Run ``serve``; returns the exit code (2: bad flags or config)."""
    import uvicorn

    from app.api.auth import exposure_warning
    from app.backend.engine import FamilyUnavailable
    from app.config import ConfigError
    from app.server import build_app

    args = parse_serve_args(argv)
    try:
        cfg, notes = load_serve_config(args)
    except (ConfigError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for note in notes:
        print(note, file=sys.stderr)
    srv = cfg.server
    from app.backend.malloc import cap_malloc_arenas

    arenas = cap_malloc_arenas(srv.malloc_arena_max)  # before the model threads start
    if cfg.recording.dir:
        from app.backend.duplex.recorder import notice

        print(f"omni-duplex: {notice(cfg.recording)}", flush=True)
    if warning := exposure_warning(srv.host, srv.api_keys):
        print(warning, file=sys.stderr, flush=True)
    try:
        app = build_app(cfg, with_ui=not args.no_ui)
    except FamilyUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    scheme = "https" if srv.ssl_certfile else "http"
    keyed = f", {len(srv.api_keys)} API key(s)" if srv.api_keys else ""
    print(f"omni-duplex: model family '{cfg.model_family}' on {scheme}://{srv.host}:{srv.port}/{keyed}"
          f" (malloc arenas {arenas})", flush=True)
    uvicorn.run(app, host=srv.host, port=srv.port, log_level=args.log_level, ws_max_size=64 * 1024 * 1024,
                ssl_keyfile=srv.ssl_keyfile, ssl_certfile=srv.ssl_certfile)
    return 0
