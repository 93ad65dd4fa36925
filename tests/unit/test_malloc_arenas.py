"""The server caps glibc's malloc arenas (``server.malloc_arena_max``) so a long run's RSS levels off."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from app.backend.malloc import cap_malloc_arenas
from app.config import load_deploy_config

ROOT = Path(__file__).resolve().parents[2]

# Eight threads alive at once, each allocating through malloc; glibc's malloc_stats() then prints
# one "Arena N:" block per arena in use.
PROBE = textwrap.dedent("""
    import ctypes, sys, threading
    from app.backend.malloc import cap_malloc_arenas
    print(cap_malloc_arenas(int(sys.argv[1]), env={}))
    barrier = threading.Barrier(8)
    def work():
        keep = bytearray(100_000)
        barrier.wait()
        [bytearray(100_000) for _ in range(20)]
        barrier.wait()
    threads = [threading.Thread(target=work) for _ in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    ctypes.CDLL("libc.so.6").malloc_stats()
""")


def arenas_used(cap: int) -> tuple[str, int]:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", PROBE, str(cap)], capture_output=True, text=True, env=env,
                         cwd=ROOT, timeout=60, check=True)
    return out.stdout.strip(), sum(1 for line in out.stderr.splitlines() if line.startswith("Arena "))


def test_the_cap_limits_the_arenas_eight_busy_threads_use():
    said, capped = arenas_used(2)
    assert said == "capped at 2"
    assert capped == 2
    said, default = arenas_used(0)
    assert said == "left at glibc's default"
    assert default > 2


def test_an_operators_MALLOC_ARENA_MAX_wins():
    assert cap_malloc_arenas(2, env={"MALLOC_ARENA_MAX": "4"}) == "set by MALLOC_ARENA_MAX=4"


def test_a_negative_cap_is_refused():
    with pytest.raises(ValueError, match=">= 0"):
        cap_malloc_arenas(-1, env={})


def test_the_default_config_caps_at_two():
    assert load_deploy_config(ROOT / "configs" / "tiny.yaml").server.malloc_arena_max == 2
