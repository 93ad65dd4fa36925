"""Cap glibc's malloc arenas so a long-running server's RSS reaches a steady state.

glibc gives each thread that contends for the heap its own arena, up to ``8 x cores`` of them
(``M_ARENA_MAX``; glibc ``mallopt(3)``), and an arena's freed pages are rarely returned to the
system. Our server runs many threads (uvicorn, the stage workers, onnxruntime and CTranslate2 pools),
so RSS crept up for ~15 minutes in the 60-minute soak (``benchmarks/bench_soak.py``) before it
levelled off. A small cap trades a little allocator contention for a flat RSS: the common setting
for long-lived Python servers (``MALLOC_ARENA_MAX=2``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

M_ARENA_MAX = -8
"""``mallopt`` parameter number of ``M_ARENA_MAX`` (glibc ``malloc.h``)."""

ENV = "MALLOC_ARENA_MAX"


def cap_malloc_arenas(arenas: int, env: dict[str, str] | None = None) -> str:
    """Limit glibc's malloc to ``arenas`` arenas for threads that start from now on.

    Args:
        arenas: the cap (>= 1); 0 leaves glibc's default (8 x cores).
        env: the environment to read (default ``os.environ``); a ``MALLOC_ARENA_MAX`` set there
            wins (glibc has applied it at start-up) and nothing is changed.

    Returns:
        What was done, one line for the start-up log: ``"capped at N"``, ``"left at glibc's
        default"``, ``"set by MALLOC_ARENA_MAX=..."`` or ``"not glibc: unchanged"``.

    Raises:
        ValueError: ``arenas`` < 0.
        OSError: glibc refused the setting (``mallopt`` returned 0).
    """
    if arenas < 0:
        raise ValueError(f"malloc arenas must be >= 0, got {arenas}")
    env = os.environ if env is None else env
    if env.get(ENV):
        return f"set by {ENV}={env[ENV]}"
    if arenas == 0:
        return "left at glibc's default"
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return "not glibc: unchanged"
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    if mallopt(M_ARENA_MAX, arenas) != 1:
        raise OSError(f"mallopt(M_ARENA_MAX, {arenas}) failed")
    return f"capped at {arenas}"
