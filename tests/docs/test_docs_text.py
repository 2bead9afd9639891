"""The docs speak of the project as it is, and the training commands they show still run:

- no README or docs sentence speaks of an earlier state of the project (a short list of
  phrases, :data:`EARLIER_STATE`);
- every training command shown in README.md and docs/*.md (``python train_ppo_lstm.py ...``,
  ``train_ppo_lstm.py ...`` after torchrun, ``train-ppo-lstm ...``; in fenced shell blocks, indented
  code and inline code) parses against today's parser. Skipped, as no parser can read them: a command
  with a placeholder (an all-capitals word such as ``N``, ``HOST:29500`` or ``TRAIN``) or a
  shell expansion (``$VAR``, ``$(...)``, ``<...>``) or usage syntax (``[--num-gpus N]``, ``...``); what follows a comment, a pipe, ``&&``,
  ``;`` or a redirection is cut off; ``--help`` and ``--print-config`` exit 0 and pass;
- README.md's "what you get" lines are the committed first run's last lines;
- no paragraph or bullet of a user page (README.md and docs/*.md but the generated
  docs/flags.md) runs over :data:`MAX_WORDS` words: measurements go in a table, evidence in a
  results note under bench/results/ (not checked here). Fenced and indented code, tables,
  headings and images are not prose and are not counted.
"""
from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from ppo_lstm.config.command_line import build_parser

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
EARLIER_STATE = ("before the batch rule", "before the rule", "another day", "the configuration before",
                 "this round", "an earlier run", "old observation", "became the default", "before this version")
MAX_WORDS = 120  # "about 120 words" at most in a paragraph or a bullet of a user page
GENERATED = {"flags.md"}  # written by docs/make_flags.py from the parsers' help
ANY_FENCE = re.compile(r"^[ \t]*(```|~~~).*?^[ \t]*\1[^\n]*$", re.S | re.M)
ITEM = re.compile(r"(?:[-*+]|\d+\.)\s")
BLOCK = re.compile(r"^```([\w-]*)\n(.*?)^```", re.S | re.M)
SHELL = {"", "bash", "sh", "shell", "console"}
INLINE = re.compile(r"`([^`]+)`")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
COMMAND = re.compile(r"(?:(?:^|\s)(?:python3? )?(?:\S*/)?train_ppo_lstm\.py|\btrain-ppo-lstm)((?:\s[^\n]*)?)$", re.M)
CUT = re.compile(r"\s(?:#|&&|\|\|?|;|>|2>|1>)(?:\s|$)")
PLACEHOLDER = re.compile(r"(?:^|[=:,\[])[A-Z][A-Z_]*(?::\d+)?\]?$|\$|<[^>]*>|^\.\.\.$|^\[")


def _shown_commands(text: str) -> list[str]:
    """The argument strings of the training commands a page shows."""
    pieces = [body for lang, body in BLOCK.findall(text) if lang in SHELL]
    rest = FENCE.sub("", text)
    pieces.append("\n".join(line for line in rest.splitlines() if line.startswith("    ")))  # indented code
    rest = "\n".join(line for line in rest.splitlines() if not line.startswith("    "))
    pieces += [m.group(1).replace("\n", " ") for m in INLINE.finditer(rest)]
    pieces = [re.sub(r"\\\n\s*", " ", piece) for piece in pieces]
    commands = []
    for piece in pieces:
        for line in piece.splitlines():
            for m in COMMAND.finditer(line):
                commands.append(CUT.split(m.group(1))[0].strip())
    return commands


def _paragraphs(text: str) -> list[str]:
    """The prose of a page, one string per paragraph or list item."""
    paragraphs, current = [], []
    for line in ANY_FENCE.sub("", text).splitlines():
        stripped = line.strip()
        item = ITEM.match(stripped)
        if (not stripped or stripped.startswith(("|", "#", "<!--", "![", "<"))
                or (line.startswith("    ") and not item and not current)):  # a table, a heading, indented code
            if current:
                paragraphs.append(" ".join(current))
            current = []
            continue
        if item and current:
            paragraphs.append(" ".join(current))
            current = []
        current.append(stripped)
    if current:
        paragraphs.append(" ".join(current))
    return paragraphs


def _parse(args: str) -> str | None:
    """None if ``args`` parses (or asks for help), else the parser's message."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            build_parser().parse_args(shlex.split(args))
    except SystemExit as stop:
        return None if stop.code == 0 else err.getvalue().strip().splitlines()[-1]
    return None


def _checked(args: str) -> bool:
    return not any(PLACEHOLDER.search(token) for token in shlex.split(args))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_sentence_speaks_of_an_earlier_state(page):
    prose = page.read_text().lower().replace("\n", " ")
    found = [phrase for phrase in EARLIER_STATE if phrase in prose]
    assert not found, f"{page.relative_to(ROOT)} speaks of an earlier state: {found}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_shown_training_command_parses(page):
    failures = [f"{args!r}: {message}" for args in _shown_commands(page.read_text())
                if _checked(args) and (message := _parse(args))]
    assert not failures, f"{page.relative_to(ROOT)}: commands today's parser refuses: {failures}"


def test_the_command_check_finds_and_refuses():
    text = ("```bash\npython train_ppo_lstm.py --episodes 8 --num-envs 2   # a comment\n"
            "torchrun --nproc-per-node 2 train_ppo_lstm.py --no-such-flag\n"
            "python train_ppo_lstm.py --num-envs N\n```\nand `train-ppo-lstm --help` inline\n")
    commands = _shown_commands(text)
    assert commands == ["--episodes 8 --num-envs 2", "--no-such-flag", "--num-envs N", "--help"]
    assert _parse(commands[0]) is None and _parse(commands[3]) is None
    assert "unrecognized arguments" in _parse(commands[1])
    assert not _checked(commands[2]) and _checked(commands[0])


def test_the_docs_show_many_training_commands():
    assert sum(len(_shown_commands(page.read_text())) for page in PAGES) > 30


def test_the_readme_quotes_the_committed_first_run():
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"^### What you get\n.*?^```text\n(.*?)^```", readme, re.S | re.M).group(1)
    output = (ROOT / "docs" / "example" / "first_run.txt").read_text().splitlines()
    quoted = block.splitlines()
    assert quoted and all(line in output for line in quoted)
    assert quoted[-1] == output[-1]


def test_the_docs_quote_the_committed_first_run_evaluation():
    """getting-started.md's and evaluation.md's simulated report are lines of the committed output."""
    output = (ROOT / "docs" / "example" / "first_run_evaluation.txt").read_text().splitlines()
    assert output[0].startswith("# evaluate-ppo-lstm --checkpoint checkpoints/best.pt --episodes 32 --seed 1 ")
    for page in ("getting-started.md", "evaluation.md"):
        block = re.search(r"^```\n(  per episode: .*?)^```", (ROOT / "docs" / page).read_text(), re.S | re.M)
        assert block, f"docs/{page} quotes no simulated report"
        quoted = [line for line in block.group(1).splitlines() if line.strip() != "..."]
        assert len(quoted) >= 8 and all(line in output for line in quoted), page


USER_PAGES = [page for page in PAGES if page.name not in GENERATED]


@pytest.mark.parametrize("page", USER_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_paragraph_runs_long(page):
    long = [f"{len(p.split())} words: {p[:70]}..." for p in _paragraphs(page.read_text())
            if len(p.split()) > MAX_WORDS]
    assert not long, f"{page.relative_to(ROOT)}: paragraphs over {MAX_WORDS} words (split them, or a table): {long}"


def test_the_paragraph_check_counts_prose_only():
    words = " ".join(["word"] * 130)
    text = (f"# Title\n\nA short one\nover two lines.\n\n- an item\n  continued\n- {words}\n\n"
            f"```bash\n{words}\n```\n\n| a | {words} |\n\n    {words}\n\n  ```\n  {words}\n  ```\n")
    paragraphs = _paragraphs(text)
    assert paragraphs[:2] == ["A short one over two lines.", "- an item continued"]
    assert [len(p.split()) for p in paragraphs] == [6, 4, 131]
