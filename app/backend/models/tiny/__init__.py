"""The embedded ``tiny`` model family (see :mod:`app.backend.models.tiny.family`).

Import :func:`load_tiny_family` from here; submodules import their heavy dependencies
(onnxruntime, faster-whisper, llama-cpp-python, piper-tts, rapidocr) only when loaded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["load_tiny_family", "warmup"]

if TYPE_CHECKING:  # pragma: no cover
    from app.backend.models.tiny.family import load_tiny_family, warmup


def __getattr__(name: str) -> Any:
    if name in __all__:
        from app.backend.models.tiny import family

        return getattr(family, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
