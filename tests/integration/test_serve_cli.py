"""``python -m app serve`` as a user runs it: a real process, vLLM-style flags, TLS, the exposure warning."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.live_server import free_port

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def _self_signed(tmp: Path) -> tuple[Path, Path]:
    key, cert = tmp / "key.pem", tmp / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    return key, cert


def test_serve_with_vllm_style_flags_tls_and_the_no_key_warning(tmp_path):
    key, cert = _self_signed(tmp_path)
    port = free_port()
    argv = [sys.executable, "-m", "app", "serve", "tiny-omni", "--omni", "--trust-remote-code", "--host", "0.0.0.0",
            "--port", str(port), "--no-ui", "--served-model-name", "tiny-omni", "demo-omni", "--max-sessions", "2",
            "--ssl-keyfile", str(key), "--ssl-certfile", str(cert), "--log-level", "warning"]
    env = {k: v for k, v in os.environ.items() if k != "OMNI_API_KEY"} | {"HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    base = f"https://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, proc.communicate()
            try:
                if httpx.get(base + "/health", verify=False, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "server did not start"
            time.sleep(0.3)
        health = httpx.get(base + "/health", verify=str(cert), timeout=5)  # (the certificate served is ours)
        assert health.json()["sessions"]["max_sessions"] == 2
        models = [m["id"] for m in httpx.get(base + "/v1/models", verify=False, timeout=5).json()["data"]]
        assert models == ["tiny-omni", "demo-omni"]
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=30)
    assert "WARNING: listening on 0.0.0.0 with no API key" in err
    assert f"on https://0.0.0.0:{port}/" in out
