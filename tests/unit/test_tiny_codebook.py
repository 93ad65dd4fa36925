"""The tiny codec codebook: shipped file, encode/decode round trips, determinism (real Piper)."""

from __future__ import annotations

import shutil
import subprocess
import sys

import numpy as np
import pytest

from app.backend.models.tiny import weights
from app.backend.models.tiny.cache import WeightIntegrityError, repo_root, sha256_file
from app.backend.models.tiny.codebook import Codebook, default_codebook_path
from app.backend.models.tiny.talker import PiperFront, TinyTalker
from app.backend.models.tiny.voice import LATENT_DIM, load_piper_split

pytestmark = pytest.mark.slow

HELD_OUT = "Bright yellow submarines quietly explored the deep ocean floor."
"""A sentence that is not among the codebook's training texts."""


@pytest.fixture(scope="module")
def codebook() -> Codebook:
    return Codebook.load()


@pytest.fixture(scope="module")
def front() -> PiperFront:
    return PiperFront(load_piper_split())


@pytest.fixture(scope="module")
def talker(front: PiperFront, codebook: Codebook) -> TinyTalker:
    return TinyTalker(front, codebook)


def test_shipped_file(codebook: Codebook) -> None:
    path = default_codebook_path()
    assert path.stat().st_size < 1_000_000
    assert sha256_file(path) == weights.CODEBOOK_SHA256
    assert codebook.vectors.dtype == np.float32
    assert codebook.vectors.shape == (1024, LATENT_DIM)
    assert codebook.size == 1024 and codebook.dim == LATENT_DIM
    assert np.all(np.isfinite(codebook.vectors))
    assert not codebook.vectors.flags.writeable
    # Entries are distinct, so every index is reachable.
    assert len(np.unique(codebook.vectors, axis=0)) == codebook.size


def test_entries_round_trip(codebook: Codebook) -> None:
    ids = np.arange(codebook.size, dtype=np.int32)
    assert np.array_equal(codebook.encode(codebook.decode(ids)), ids)


def test_encode_is_nearest_entry(codebook: Codebook, front: PiperFront) -> None:
    z = front.latents(HELD_OUT)
    tokens = codebook.encode(z)
    assert tokens.dtype == np.int32 and tokens.shape == (len(z),)
    brute = np.argmin(((z[:, None, :] - codebook.vectors[None]) ** 2).sum(-1), axis=1)
    # Matrix-form distances may break exact float ties differently; compare distances.
    d_ours = ((z - codebook.vectors[tokens]) ** 2).sum(-1)
    d_brute = ((z - codebook.vectors[brute]) ** 2).sum(-1)
    np.testing.assert_allclose(d_ours, d_brute, rtol=1e-4, atol=1e-3)


def test_latent_round_trip(codebook: Codebook, front: PiperFront) -> None:
    z = front.latents(HELD_OUT)
    tokens = codebook.encode(z)
    recon = codebook.decode(tokens)
    assert recon.shape == z.shape and recon.dtype == np.float32
    # Quantising a reconstruction is idempotent.
    assert np.array_equal(codebook.encode(recon), tokens)
    rel = np.linalg.norm(recon - z) / np.linalg.norm(z)
    assert rel < 0.5, f"relative VQ error {rel:.3f} on a held-out sentence"


def test_talker_is_deterministic(talker: TinyTalker) -> None:
    a = talker.synthesize("The capital of France is Paris.")
    b = talker.synthesize("The capital of France is Paris.")
    assert a.dtype == np.int32 and a.ndim == 1 and len(a) > 50
    assert np.array_equal(a, b)
    assert a.min() >= 0 and a.max() < talker.codebook.size
    # ~1.9 s of speech at 86.13 frames/s.
    assert 1.0 < len(a) / talker.frame_rate_hz < 3.5


def test_blank_text_gives_no_tokens(talker: TinyTalker) -> None:
    for text in ("", "   ", "\n"):
        out = talker.synthesize(text)
        assert out.dtype == np.int32 and out.shape == (0,)


def test_frame_rate_from_voice_config() -> None:
    split = load_piper_split()
    assert split.sample_rate_hz == split.config["audio"]["sample_rate"]
    assert split.frame_rate_hz == pytest.approx(split.sample_rate_hz / split.hop_length)
    assert split.frame_rate_hz == pytest.approx(86.1328125)


def test_invalid_inputs(codebook: Codebook) -> None:
    with pytest.raises(ValueError):
        codebook.encode(np.zeros((3, 7), np.float32))
    with pytest.raises(ValueError):
        codebook.decode(np.array([0, codebook.size]))
    with pytest.raises(ValueError):
        codebook.decode(np.array([-1]))
    with pytest.raises(ValueError):
        codebook.decode(np.zeros((2, 2), np.int32))
    with pytest.raises(ValueError):
        codebook.decode(np.array([0.5]))
    with pytest.raises(ValueError):
        Codebook(np.zeros((0, 4), np.float32))
    assert codebook.decode(np.zeros(0, np.int32)).shape == (0, codebook.dim)
    assert codebook.encode(np.zeros((0, codebook.dim), np.float32)).shape == (0,)


def test_tampered_codebook_is_rejected(tmp_path) -> None:
    bad = tmp_path / "codebook.npy"
    shutil.copyfile(default_codebook_path(), bad)
    arr = np.load(bad)
    arr[0, 0] += 1.0
    np.save(bad, arr)
    with pytest.raises(WeightIntegrityError):
        Codebook.load(bad)
    assert Codebook.load(bad, verify=False).vectors[0, 0] == arr[0, 0]


def test_fit_script_reproduces_shipped_codebook() -> None:
    pytest.importorskip("sklearn", reason="scikit-learn (dev extra) is needed to refit")
    proc = subprocess.run(
        [sys.executable, str(repo_root() / "scripts" / "fit_codebook.py"), "--check"],
        check=False, capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "matches shipped file" in proc.stdout  # bit for bit, or (another CPU) in quality within 1 %
