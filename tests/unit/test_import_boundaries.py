"""The rooms hold: media imports no server code, the backend never imports the API, UI or client
layers, the API never imports the UI, and inside the backend each sub-package imports only the
rooms below it:

    protocol   (the wire)           -> media, constants
    turns      (end of turn)        -> constants
    pipeline   (stages, workers)    -> metrics, constants
    models/*   (stage implementations per family) -> pipeline, turns
    duplex     (session owner + collaborators, manager) -> protocol, pipeline, turns, metrics, media
    remote     (vLLM-Omni backends) -> protocol, duplex.manager, duplex.recorder, engine, metrics, media
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parents[2] / "app"
BACKEND = APP / "backend"

FORBIDDEN = {
    "media": ("app.backend", "app.api", "app.ui", "app.client", "app.server", "fastapi", "gradio", "fastrtc"),
    "backend": ("app.api", "app.ui", "app.client", "app.server", "gradio", "fastrtc"),
    "api": ("app.ui",),
}

BACKEND_ROOMS = ("protocol", "turns", "pipeline", "models", "duplex", "remote")
ALLOWED_BACKEND_IMPORTS = {
    "protocol": (),
    "turns": (),
    "pipeline": ("app.backend.metrics",),
    "models": ("app.backend.pipeline", "app.backend.turns"),
    "duplex": ("app.backend.protocol", "app.backend.pipeline", "app.backend.turns", "app.backend.metrics"),
    "remote": ("app.backend.protocol", "app.backend.duplex.manager", "app.backend.duplex.recorder", "app.backend.engine",
               "app.backend.metrics"),
}
"""Backend room -> the other backend modules it may import (its own room is always allowed)."""

MAX_TOP_LEVEL_MODULES = 6
MAX_MODULE_LINES = 600


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


def _under(mod: str, prefixes: tuple[str, ...]) -> bool:
    return any(mod == p or mod.startswith(p + ".") for p in prefixes)


@pytest.mark.parametrize("room", sorted(FORBIDDEN))
def test_room_imports(room):
    bad = []
    for path in (APP / room).rglob("*.py"):
        for mod in _imports(path):
            if _under(mod, FORBIDDEN[room]):
                bad.append(f"{path.relative_to(APP.parent)} imports {mod}")
    assert not bad, bad


@pytest.mark.parametrize("room", BACKEND_ROOMS)
def test_backend_rooms_import_only_the_rooms_below_them(room):
    allowed = (f"app.backend.{room}", *ALLOWED_BACKEND_IMPORTS[room])
    bad = []
    for path in (BACKEND / room).rglob("*.py"):
        for mod in _imports(path):
            if _under(mod, ("app.backend",)) and not _under(mod, allowed):
                bad.append(f"{path.relative_to(APP.parent)} imports {mod}")
    assert not bad, bad


def test_the_backend_top_level_holds_few_modules_and_every_room_is_a_package():
    top = sorted(p.name for p in BACKEND.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, top
    rooms = sorted(p.name for p in BACKEND.iterdir() if p.is_dir() and p.name != "__pycache__")
    assert rooms == sorted(BACKEND_ROOMS), rooms
    assert all((BACKEND / r / "__init__.py").exists() for r in rooms)


def test_no_module_in_app_is_longer_than_600_lines():
    long = {str(p.relative_to(APP.parent)): n for p in APP.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, long


def _is_mixin(node: ast.ClassDef) -> bool:
    """A class that declares attributes it never sets (bare annotations, no ``__init__``) and is not
    a dataclass, Protocol, TypedDict, NamedTuple or pydantic model: its methods use state that a
    subclass owns."""
    decorated = any("dataclass" in ast.unparse(d) for d in node.decorator_list)
    special = any(ast.unparse(b).split(".")[-1] in ("Protocol", "TypedDict", "NamedTuple", "BaseModel")
                  for b in node.bases)
    bare = any(isinstance(st, ast.AnnAssign) and st.value is None for st in node.body)
    has_init = any(isinstance(st, ast.FunctionDef) and st.name == "__init__" for st in node.body)
    return bare and not has_init and not decorated and not special


def test_no_class_in_app_is_assembled_from_mixins():
    classes: dict[str, tuple[str, ast.ClassDef]] = {}
    for path in APP.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                classes[node.name] = (str(path.relative_to(APP.parent)), node)
    bad = []
    for where, node in classes.values():
        for base in node.bases:
            name = ast.unparse(base).split(".")[-1]
            if name in classes and _is_mixin(classes[name][1]):
                bad.append(f"{where}: {node.name} inherits the mixin {name} ({classes[name][0]})")
    assert not bad, bad
