"""Cache root, atomic generation and sha256 pinning of the tiny family's weight files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.backend.models.tiny import cache, weights
from app.backend.models.tiny.asr import whisper_model_dir
from app.backend.models.tiny.cache import (
    WeightIntegrityError,
    atomic_write,
    cache_root,
    sha256_file,
    verify_sha256,
)
from app.backend.models.tiny.voice import load_piper_split


@pytest.fixture
def tmp_cache(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "models"
    monkeypatch.setenv(cache.CACHE_ENV, str(root))
    return root


def test_cache_root_default_and_env(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv(cache.CACHE_ENV, raising=False)
    assert cache_root() == cache.repo_root() / ".cache" / "models"
    assert (cache.repo_root() / "app" / "backend" / "pipeline" / "stages.py").is_file()
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "elsewhere"))
    assert cache_root() == tmp_path / "elsewhere" and cache_root().is_dir()


def test_verify_sha256(tmp_path) -> None:
    f = tmp_path / "w.bin"
    f.write_bytes(b"weights")
    digest = sha256_file(f)
    assert verify_sha256(f, digest, "test") == f
    with pytest.raises(WeightIntegrityError, match="sha256 mismatch"):
        verify_sha256(f, "0" * 64, "test")
    with pytest.raises(FileNotFoundError):
        verify_sha256(tmp_path / "missing.bin", digest, "test")


def test_atomic_write_leaves_no_partial_file(tmp_path) -> None:
    dest = tmp_path / "out.bin"

    def failing(tmp: Path) -> None:
        tmp.write_bytes(b"half")
        raise OSError("disk full")

    with pytest.raises(OSError):
        atomic_write(dest, failing)
    assert not dest.exists()
    assert list(tmp_path.iterdir()) == []
    atomic_write(dest, lambda tmp: tmp.write_bytes(b"whole"))
    assert dest.read_bytes() == b"whole"
    assert dest.stat().st_mode & 0o777 == 0o644


@pytest.mark.slow
def test_whisper_dir_is_assembled_and_verified(tmp_cache: Path, monkeypatch) -> None:
    folder = whisper_model_dir()
    assert folder == tmp_cache / "whisper-base-ct2"
    assert sorted(p.name for p in folder.iterdir()) == [
        "config.json",
        "model.bin",
        "tokenizer.json",
        "vocabulary.txt",
    ]
    assert whisper_model_dir() == folder  # idempotent
    # A wrong cached file is regenerated from the packages ...
    good = sha256_file(folder / "config.json")
    (folder / "config.json").write_text("{}")
    whisper_model_dir()
    assert sha256_file(folder / "config.json") == good
    # ... but if the packages themselves do not give the pinned digest, loading is refused.
    pinned = dict(weights.WHISPER_BASE_FILES, **{"tokenizer.json": "0" * 64})
    monkeypatch.setattr(weights, "WHISPER_BASE_FILES", pinned)
    with pytest.raises(WeightIntegrityError, match="whisper base"):
        whisper_model_dir()


@pytest.mark.slow
def test_piper_split_regenerates_corrupt_half(tmp_cache: Path) -> None:
    split = load_piper_split()
    manifest = json.loads((split.front_path.parent / "manifest.json").read_text())
    good = sha256_file(split.decoder_path)
    assert manifest["files"]["decoder.onnx"] == good
    split.decoder_path.write_bytes(b"not an onnx graph")
    again = load_piper_split()
    assert sha256_file(again.decoder_path) == good
    assert again.frame_rate_hz == pytest.approx(86.1328125)
