"""The rooms of DESIGN.md hold: media imports no server code, the backend never imports the
API, UI or client layers, and the API never imports the UI."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parents[2] / "app"

FORBIDDEN = {
    "media": ("app.backend", "app.api", "app.ui", "app.client", "app.server", "fastapi", "gradio", "fastrtc"),
    "backend": ("app.api", "app.ui", "app.client", "app.server", "gradio", "fastrtc"),
    "api": ("app.ui",),
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


@pytest.mark.parametrize("room", sorted(FORBIDDEN))
def test_room_imports(room):
    bad = []
    for path in (APP / room).rglob("*.py"):
        for mod in _imports(path):
            if any(mod == f or mod.startswith(f + ".") for f in FORBIDDEN[room]):
                bad.append(f"{path.relative_to(APP.parent)} imports {mod}")
    assert not bad, bad
