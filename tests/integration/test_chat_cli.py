"""``python -m app chat``: against a live server (openai SDK) and in-process (engine + run_chat)."""

from __future__ import annotations

import argparse

import pytest
import soundfile as sf

from app.client.chat import run_chat_cli
from app.constants import OUTPUT_SAMPLE_RATE_HZ

pytestmark = pytest.mark.slow


def args(**kw) -> argparse.Namespace:
    base = {"text": None, "audio": None, "image": None, "url": None, "out": "reply.wav", "text_only": False,
            "deploy_config": None}
    base.update(kw)
    return argparse.Namespace(**base)


def test_cli_against_server_writes_reply_wav(server, tmp_path, capsys) -> None:
    out = tmp_path / "reply.wav"
    assert run_chat_cli(args(text="What is the capital of France?", url=server.base_url, out=str(out))) == 0
    printed = capsys.readouterr().out
    assert "transcript:" in printed and "paris" in printed.lower(), printed
    assert "heard: What is the capital of France?" in printed  # what the server understood (x_omni.user_text)
    assert f"audio: {out}" in printed
    info = sf.info(str(out))
    assert info.samplerate == OUTPUT_SAMPLE_RATE_HZ and info.channels == 1 and info.duration > 0.5


def test_cli_text_only_writes_no_wav(server, tmp_path, capsys) -> None:
    out = tmp_path / "none.wav"
    assert run_chat_cli(args(text="Hi", url=server.base_url + "/v1", out=str(out), text_only=True)) == 0
    assert "audio: (none)" in capsys.readouterr().out
    assert not out.exists()


def test_cli_in_process(tmp_path, capsys) -> None:
    out = tmp_path / "local.wav"
    assert run_chat_cli(args(text="What is the capital of France?", out=str(out))) == 0
    captured = capsys.readouterr()
    assert "loaded in this process" in captured.err and "--url" in captured.err  # said, not silent
    printed = captured.out
    assert "heard: What is the capital of France?" in printed
    assert "paris" in printed.lower(), printed
    assert sf.info(str(out)).samplerate == OUTPUT_SAMPLE_RATE_HZ


def test_cli_missing_file_is_exit_2(tmp_path, capsys) -> None:
    assert run_chat_cli(args(audio=str(tmp_path / "nope.wav"))) == 2
    assert "no such file" in capsys.readouterr().err
