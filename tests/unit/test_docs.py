"""README.md and docs/*.md: every fenced shell command names a CLI subcommand or a file that exists, the README
stays short with the two commands first, every relative link resolves, and no command of the README as it was
before the docs/ split (705 lines, commit 8e11233) was lost."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 250
TWO_COMMANDS = ("bash scripts/run.sh", "bash scripts/test.sh")

OTHER_MACHINES = ("vllm serve ", "vllm bench ", "curl ", "CUDA_VISIBLE_DEVICES=", "for ", "done")
"""Commands for other machines (a GPU host with vLLM-Omni, an HTTP client): not checkable here."""
SHELL_LANGS = {"bash", "sh", "shell", "console", ""}
FILE_PREFIXES = ("scripts/", "benchmarks/", "configs/")
FENCE = re.compile(r"^\s*```\s*(\w*)\s*$")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def fenced_blocks(text: str) -> list[tuple[str, list[str]]]:
    """``[(language, lines)]`` of every fenced code block."""
    blocks: list[tuple[str, list[str]]] = []
    lang: str | None = None
    for line in text.splitlines():
        m = FENCE.match(line)
        if m and lang is None:
            lang, lines = m.group(1), []
        elif line.strip() == "```" and lang is not None:
            blocks.append((lang, lines))
            lang = None
        elif lang is not None:
            lines.append(line)
    return blocks


def shell_commands(text: str) -> list[str]:
    """Each command of the shell blocks: comment lines dropped, ``\\`` continuations and lines inside an open
    quote joined."""
    out: list[str] = []
    for lang, lines in fenced_blocks(text):
        if lang not in SHELL_LANGS:
            continue
        buf = ""
        for raw in lines:
            s = raw.strip()
            if not buf and (not s or s.startswith("#")):
                continue
            buf = f"{buf} {s}" if buf else s
            if buf.endswith("\\"):
                buf = buf[:-1].rstrip()
                continue
            try:
                shlex.split(buf, comments=True)
            except ValueError:  # an open quote: the command goes on
                continue
            out.append(buf)
            buf = ""
    return out


def cli_subcommands() -> set[str]:
    """The subcommands ``python -m app`` accepts, read from ``app/cli.py``'s own parser (its ``--help``)."""
    from app import cli

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), pytest.raises(SystemExit):
        cli.main(["--help"])
    m = re.search(r"\{([a-z,-]+)\}", buf.getvalue())
    assert m, buf.getvalue()
    return set(m.group(1).split(","))


def check_command(cmd: str, subs: set[str], root: Path = ROOT) -> str | None:
    """None when ``cmd`` names an existing CLI subcommand, module or repo file (or is for another machine),
    else what is wrong."""
    if cmd.startswith(OTHER_MACHINES):
        return None
    tokens = shlex.split(cmd, comments=True)
    for tok in tokens:
        if tok.startswith(FILE_PREFIXES) and Path(tok).suffix and not (root / tok).exists():
            return f"{tok} does not exist"
    if "-m" in tokens[:3]:
        mod = tokens[tokens.index("-m") + 1]
        if mod == "app":
            rest = tokens[tokens.index("-m") + 2:]
            if not rest or rest[0] not in subs:
                return f"`python -m app {rest[0] if rest else ''}` is not a subcommand of app/cli.py ({sorted(subs)})"
            return None
        base = root / mod.replace(".", "/")
        return None if base.with_suffix(".py").is_file() or (base / "__init__.py").is_file() else f"no module {mod}"
    if tokens[0] in ("bash", "sh", ".venv/bin/python", "python", "python3") and len(tokens) > 1:
        return None if (root / tokens[1]).is_file() else f"{tokens[1]} does not exist"
    if (root / tokens[0]).is_file():
        return None
    return f"names no CLI subcommand or repo file: {tokens[0]}"


@pytest.fixture(scope="module")
def subs() -> set[str]:
    return cli_subcommands()


def test_every_fenced_shell_command_names_a_subcommand_or_a_file_that_exists(subs):
    problems = []
    for page in PAGES:
        for cmd in shell_commands(page.read_text(encoding="utf-8")):
            why = check_command(cmd, subs)
            if why:
                problems.append(f"{page.relative_to(ROOT)}: {cmd[:90]} -> {why}")
    assert not problems, "\n".join(problems)
    assert sum(len(shell_commands(p.read_text(encoding="utf-8"))) for p in PAGES) >= 20


def test_the_check_catches_a_wrong_subcommand_script_or_config(subs):
    text = "```bash\n.venv/bin/python -m app servee --port 1\nbash scripts/no_such.sh\n.venv/bin/python -m app serve --deploy-config configs/no_such.yaml\nmake everything\nvllm serve some/model\n```"
    whys = [check_command(c, subs) for c in shell_commands(text)]
    assert [w is not None for w in whys] == [True, True, True, True, False], whys


def test_readme_is_short_and_the_two_commands_come_first():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= README_MAX_LINES
    _first_lang, first = fenced_blocks(text)[0]
    assert [c.split("#")[0].strip() for c in shell_commands("```bash\n" + "\n".join(first) + "\n```")] \
        == list(TWO_COMMANDS)


def test_every_relative_link_resolves():
    bad = []
    for page in PAGES:
        for target in LINK.findall(page.read_text(encoding="utf-8")):
            if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                continue
            path = (page.parent / target.split("#")[0]).resolve()
            if not path.exists():
                bad.append(f"{page.relative_to(ROOT)}: {target}")
    assert not bad, bad


def test_each_docs_page_is_linked_from_the_readme():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    linked = {t.split("#")[0] for t in LINK.findall(readme)}
    assert [p.name for p in PAGES[1:] if f"docs/{p.name}" not in linked] == []


OLD_README_COMMANDS = [
    "bash scripts/run.sh", "bash scripts/test.sh",
    '.venv/bin/python -m app chat --text "What is the capital of France?" --out reply.wav',
    (".venv/bin/python -m app chat --audio .cache/samples/question.wav --image .cache/samples/image.png "
    "--url http://127.0.0.1:7860"),
    (".venv/bin/python -m app realtime-demo --url http://127.0.0.1:7860 --input-wav .cache/samples/question.wav "
    "--output-dir out/"),
    (".venv/bin/python -m app realtime-demo --url http://127.0.0.1:7860 --input-video .cache/samples/clip.mp4 "
    "--video-fps 1 --stack-frames 3 --output-dir out/"),
    "bash scripts/barge_in_serve.sh --port 8000",
    ".venv/bin/python scripts/make_barge_in_wav.py out/barge_in.wav",
    (".venv/bin/python -m app barge-in-check --url http://127.0.0.1:8000 --input-wav out/barge_in.wav "
    "--validation-mode response-required --input-sha256 <sha256> --expect-second-response-substring rome"),
    ".venv/bin/python -m app barge-in-check --url http://127.0.0.1:8000 --input-wav any.wav",
    ("vllm bench omni-duplex-eval --omni generate --url ws://127.0.0.1:7860/v1/realtime?duplex=1 --model tiny-omni "
    "--ref-audio voice.wav --response-root out/ode --split RTD_OCR --limit 20 --pace realtime --clock media "
    "--concurrency 1"),
    ("vllm bench omni-duplex-eval --omni evaluate --response-root out/ode --score-root out/ode-scores "
    "--judge-base-url http://127.0.0.1:8001 --judge-model Qwen/Qwen2.5-VL-7B-Instruct --judge-api-key EMPTY "
    "--judge-video-mode frame-sample --judge-fps 2 --window-size 10"),
    "vllm bench omni-duplex-eval --omni summarize --score-root out/ode-scores",
    ".venv/bin/python -m app serve --record-dir recordings/",
    (".venv/bin/python -m app replay recordings/<UTC start>_<session id> --url http://127.0.0.1:7860 "
    "[--output-dir out/replay] [--pace realtime|fast]"),
    ".venv/bin/python -m app chat --host 127.0.0.1 --port 7860 --query-type use_image",
    '.venv/bin/python -m app chat --port 7860 --stream --text "Tell me about Paris"',
    (".venv/bin/python -m app chat --port 7860 --num-concurrent-requests 4 --modalities text "
    '--prompts "What is the capital of France?,What is the capital of Italy?"'),
    ('.venv/bin/python -m app chat --url http://127.0.0.1:7860 --video .cache/samples/clip.mp4 '
    '--text "What does the sign say?"'),
    ("vllm serve openbmb/MiniCPM-o-4_5 --omni --trust-remote-code --port 8091 "
    "--deploy-config vllm_omni/deploy/minicpmo_4_5_2gpu.yaml"),
    ".venv/bin/python -m app serve --deploy-config configs/remote.yaml",
    ("CUDA_VISIBLE_DEVICES=$i vllm serve openbmb/MiniCPM-o-4_5 --omni --trust-remote-code --port $((8091 + i)) "
    "--deploy-config vllm_omni/deploy/minicpmo_4_5.yaml &"),
    ".venv/bin/python -m app serve --deploy-config configs/remote_pool.yaml",
]
"""The fenced commands of the README before the split (comments dropped; the four curl requests are checked by
their payloads below)."""
OLD_README_INLINE = [
    "scripts/run.sh --port 8000", "scripts/run.sh --host 127.0.0.1", "python -m app chat --url ...",
    "vllm bench omni-duplex-eval --omni generate|evaluate|summarize", 'bash scripts/test.sh -m "not e2e"',
    "bash scripts/test.sh tests/unit", ".venv/bin/python -m tests.golden.harness",
    'curl -X POST -H "Authorization: Bearer $ADMIN_KEY" http://front:8000/admin/backends/gpu-13/drain',
    "python -m app serve --deploy-config configs/minicpmo_4_5.yaml",
    '"messages":[{"role":"user","content":"What is the capital of France?"}]}\'',
    '{"type":"input_audio","input_audio":{"data":"\'"$(base64 -w0 .cache/samples/question.wav)"\'","format":"wav"}}',
    '"data:image/png;base64,\'"$(base64 -w0 .cache/samples/image.png)"\'"',
    '"data:video/mp4;base64,\'"$(base64 -w0 .cache/samples/clip.mp4)"\'"',
]
"""Commands the README gave inline (in backticks) or as curl payloads before the split."""


def test_no_command_of_the_old_readme_is_lost():
    texts = [p.read_text(encoding="utf-8") for p in PAGES]
    fenced = {" ".join(c.split(" #")[0].split()) for t in texts for c in shell_commands(t)}
    whole = "\n".join(texts)
    lost = [c for c in OLD_README_COMMANDS if c not in fenced] + [c for c in OLD_README_INLINE if c not in whole]
    assert not lost, lost
