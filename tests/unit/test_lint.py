"""The code base passes ruff's default rules (pyflakes and pycodestyle errors).

Most of what it catches, an undefined name above all, fails only on the branch that reaches it:
a property test's rare example, an error path. Linting every file catches it before that branch runs.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECKED = ["app", "tests", "e2e", "benchmarks", "scripts"]


def _ruff() -> str:
    here = Path(sys.executable).with_name("ruff")
    found = str(here) if here.exists() else shutil.which("ruff")
    if found is None:
        pytest.fail("ruff is not installed: run scripts/setup.sh --dev (it is a dev dependency)")
    return found


def test_ruff_finds_nothing() -> None:
    done = subprocess.run([_ruff(), "check", "--no-cache", *CHECKED], check=False, cwd=ROOT,
                          capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_ruff_reports_an_undefined_name(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    return UNDEFINED_NAME\n")
    done = subprocess.run([_ruff(), "check", "--no-cache", str(bad)], check=False, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 1 and "F821" in done.stdout, done.stdout + done.stderr
