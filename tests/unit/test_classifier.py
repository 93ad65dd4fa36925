"""The ImageNet classifier of the tiny eyes (app/backend/models/tiny/classifier.py): a PyTorch
state dict read without torch, run by ONNX Runtime, on the real photos gradio ships."""

from __future__ import annotations

import io
import pickle
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from app.backend.models.tiny import classifier as C
from app.backend.models.tiny import weights
from app.backend.models.tiny.cache import WeightIntegrityError
from app.backend.models.tiny.shapes import SHAPES
from app.backend.models.tiny.vision import SceneDescriber


def photo(name: str) -> np.ndarray:
    import gradio

    return np.asarray(Image.open(Path(gradio.__file__).parent / "media_assets" / "images" / name).convert("RGB"))


@pytest.fixture(scope="module")
def clf() -> C.ImageNetClassifier:
    return C.ImageNetClassifier(threads=1)


def test_the_state_dict_is_read_without_torch() -> None:
    pth, _labels = C.model_paths()
    sd = C.load_legacy_state_dict(pth)
    assert "torch" not in sys.modules
    assert len(sd) == 296 and sd["_fc.weight"].shape == (1000, 1280) and sd["_fc.weight"].dtype == np.float32
    assert sd["_conv_stem.weight"].shape == (32, 3, 3, 3)
    assert sum(v.size for k, v in sd.items() if not k.endswith("num_batches_tracked")) > 4_000_000


def test_a_weight_file_naming_another_global_is_refused(tmp_path) -> None:
    class Evil:
        def __reduce__(self):
            return (print, ("ran",))

    path = tmp_path / "evil.pth"
    with open(path, "wb") as f:
        for obj in (0x1950A86A20F9469CFC6C, 1001, {"little_endian": True}, Evil()):
            pickle.dump(obj, f, protocol=2)
    with pytest.raises(pickle.UnpicklingError, match="refused global .*print"):
        C.load_legacy_state_dict(path)
    path.write_bytes(pickle.dumps(12345, protocol=2))
    with pytest.raises(ValueError, match="not a legacy PyTorch file"):
        C.load_legacy_state_dict(path)


def test_a_changed_weight_file_is_refused(monkeypatch) -> None:
    monkeypatch.setattr(weights, "EFFICIENTNET_LITE0_SHA256", "0" * 64)
    with pytest.raises(WeightIntegrityError):
        C.ImageNetClassifier()


@pytest.mark.parametrize("name,label", [("cheetah.jpg", "cheetah"), ("cheetah1.jpg", "cheetah"), ("lion.jpg", "lion")])
def test_photos_get_their_class(clf, name, label) -> None:
    top = clf.classify(photo(name))
    assert top[0][0] == label and top[0][1] > 0.5, top
    assert len(top) == 3 and top[0][1] >= top[1][1] >= top[2][1]


@pytest.mark.parametrize("name,label", [("cheetah.jpg", "cheetah"), ("lion.jpg", "lion")])
def test_the_describer_says_what_a_photo_looks_like(clf, name, label) -> None:
    said = SceneDescriber(None, clf).describe(photo(name))
    assert said.endswith(f"it looks like a {label}"), said
    assert not any(w in said.split() for w in (*SHAPES, *(s + "s" for s in SHAPES))), said


def test_plain_and_drawn_frames_get_no_label(clf) -> None:
    eyes = SceneDescriber(None, clf)
    assert eyes.describe(np.full((480, 640, 3), 200, np.uint8)) == "a plain white background"
    img = Image.new("RGB", (640, 480), "white")
    from PIL import ImageDraw

    ImageDraw.Draw(img).ellipse([200, 120, 440, 360], fill="red")
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=70)
    assert eyes.describe(np.asarray(Image.open(buf))) == "a white background with a big red circle"


def test_bad_input_raises_value_error(clf) -> None:
    for bad in (np.zeros((32, 32, 3), np.float32), np.zeros((32, 32), np.uint8), np.zeros((0, 5, 3), np.uint8)):
        with pytest.raises(ValueError):
            clf.classify(bad)
