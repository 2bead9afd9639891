"""The docs speak of the project as it is:

- no README or docs sentence speaks of an earlier state of the project (a short list of
  phrases, :data:`EARLIER_STATE`, less the uses :data:`LEGITIMATE` describes; known cases wait in
  ``known_doc_failures.py``);
- README.md's "what you get" lines are the committed first run's last lines;
- no paragraph or bullet of a user page (README.md and docs/*.md but the generated
  docs/flags.md) runs over :data:`MAX_WORDS` words: measurements go in a table, evidence in a
  results note under bench/results/ (not checked here). Fenced and indented code, tables,
  headings and images are not prose and are not counted.

That every command the pages show still parses is ``test_doc_commands.py``.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from known_doc_failures import assert_known

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
EARLIER_STATE = ("before the batch rule", "before the rule", "another day", "the configuration before",
                 "this round", "an earlier run", "old observation", "became the default", "before this version",
                 "before it", "no longer", "used to")  # the last three: issue #60
# Uses of a phrase that speak of no earlier state: a hit inside a match of its pattern is not one.
LEGITIMATE = {
    "before it": re.compile(r"\b(?:bars?|window|one|checkpoint|just)\s+before\s+it\b"  # the bars before it
                            r"|\bbefore\s+it\s+(?!was\b)(?:is|can|\w+s)\b", re.I),  # before it sleeps, ... is read
    "no longer": re.compile(r"\bno\s+longer\s+than\b", re.I),  # no longer than 10 s
    "used to": re.compile(r"\b(?:is|are|was|were|be|been|being|or|and|not)\s+used\s+to\b", re.I),  # is used to pick
}
MAX_WORDS = 120  # "about 120 words" at most in a paragraph or a bullet of a user page
GENERATED = {"flags.md"}  # written by docs/make_flags.py from the parsers' help
ANY_FENCE = re.compile(r"^[ \t]*(```|~~~).*?^[ \t]*\1[^\n]*$", re.S | re.M)
ITEM = re.compile(r"(?:[-*+]|\d+\.)\s")


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


def earlier_state(text: str) -> dict[str, list[int]]:
    """The phrases of :data:`EARLIER_STATE` that ``text`` uses (across line breaks too, in any
    case, as whole words), each with the lines it is on; the uses :data:`LEGITIMATE` names excepted."""
    found: dict[str, list[int]] = {}
    for phrase in EARLIER_STATE:
        pattern = re.compile(r"\b" + r"\s+".join(map(re.escape, phrase.split())) + r"\b", re.I)
        fine = [m.span() for m in LEGITIMATE[phrase].finditer(text)] if phrase in LEGITIMATE else []
        for hit in pattern.finditer(text):
            if not any(start <= hit.start() and hit.end() <= end for start, end in fine):
                found.setdefault(phrase, []).append(text.count("\n", 0, hit.start()) + 1)
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_sentence_speaks_of_an_earlier_state(page):
    name = str(page.relative_to(ROOT))
    found = earlier_state(page.read_text(encoding="utf-8"))
    assert_known(name, "earlier state", {phrase: f"{phrase!r} on line(s) {', '.join(f'{name}:{n}' for n in lines)}"
                                         for phrase, lines in found.items()})


def test_the_earlier_state_check_sees_the_phrases():
    text = ("Batch 128, as before the\nbatch rule. It no longer clips, and the rule used to pick 4. The\n"
            "bars before it are its window; it waits before it sleeps; the cap, before it was the default.\n"
            "A run no longer than 10 s. The seed is used to pick the paths.")
    assert earlier_state(text) == {"before the batch rule": [1], "before it": [3], "no longer": [2], "used to": [2]}


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
