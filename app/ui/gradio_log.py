"""Keep Gradio's stray debug print out of the server's output.

gradio 5.50.0 (pinned in ``pyproject.toml``; the last 5.x) prints ``content_type <type>`` to
stdout on every ``POST /gradio_api/component_server/`` (``get_item_or_file`` in
``gradio/routes.py``; upstream issue gradio-app/gradio#12030). FastRTC's components call that
route for their offer and for every ICE candidate, so each call start wrote a dozen such lines
into the server's log. It also prints ``new /`` once at start (``mount_gradio_app``).
:func:`install` gives ``gradio.routes`` a module-level ``print`` that drops exactly those two
calls and passes every other one on to :func:`builtins.print`.
"""

from __future__ import annotations

import builtins
from typing import Any


def _print(*args: Any, **kwargs: Any) -> None:
    """``print`` for ``gradio.routes``: its ``("content_type", <value>)`` and ``("new", <mount
    path>)`` debug lines are dropped."""
    if len(args) == 2 and args[0] in ("content_type", "new") and isinstance(args[1], str) and not kwargs:
        return
    builtins.print(*args, **kwargs)


def install() -> None:
    """Shadow ``print`` in ``gradio.routes`` (idempotent; the module's other output is unchanged)."""
    import gradio.routes

    gradio.routes.print = _print  # type: ignore[attr-defined]  # (a module global wins over the builtin)
