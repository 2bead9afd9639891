"""README.md is the front door a newcomer reads in three minutes (issue #60): at most
:data:`MAX_BYTES`, its sections in this order, each as short as the issue asks:

1. what it is, in three lines (under the title);
2. the two fresh-machine commands (Quick start);
3. what you get: the committed first run's last lines (their text: ``test_docs_text.py``);
4. the usage block;
5. many GPUs and nodes, in 6 lines;
6. resume, in 4 lines;
7. a results table of at most 6 rows, each with its command (which parses: ``test_doc_commands.py``)
   and its committed output;
8. the code map;
9. links to the docs.

Lines are counted without blank lines and fence lines.
"""
from __future__ import annotations

import re

from doc_commands import ROOT, refusal, shown_commands

README = ROOT / "README.md"
MAX_BYTES = 8192
# (heading, the most lines its section may have before the next heading; None: no limit)
SECTIONS = [
    ("# ppo-lstm-trader", 3),
    ("## Quick start", None),
    ("### What you get", None),
    ("## Usage", None),
    ("## Many GPUs and nodes", 6),
    ("## Resume", 4),
    ("## Results", None),
    ("## Code map", None),
    ("## Docs", None),
]
MAX_RESULT_ROWS = 6
FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.S | re.M)
LINK = re.compile(r"\]\(([^)\s]+)\)")


def sections(text: str) -> list[tuple[str, list[str]]]:
    """The page's headings (outside code) in order, each with its lines up to the next heading."""
    found: list[tuple[str, list[str]]] = []
    in_fence = False
    for line in text.splitlines():
        if re.match(r"(```|~~~)", line):
            in_fence = not in_fence
        if not in_fence and re.match(r"#{1,6} ", line):
            found.append((line.strip(), []))
        elif found:
            found[-1][1].append(line)
    return found


def _counted(lines: list[str]) -> list[str]:
    return [line for line in lines if line.strip() and not re.match(r"\s*(```|~~~)", line)]


def result_rows(lines: list[str]) -> list[list[str]]:
    """The cells of a section's table rows, less its header and separator rows."""
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in lines if line.startswith("|")]
    return [row for row in rows[1:] if not all(re.fullmatch(r":?-+:?", cell) for cell in row)]


def shape_problems(text: str) -> list[str]:
    """What keeps ``text`` (a README) from the shape above; empty when it has it."""
    problems = []
    size = len(text.encode("utf-8"))
    if size > MAX_BYTES:
        problems.append(f"{size} bytes, over {MAX_BYTES}")
    found = sections(text)
    headings = [heading for heading, _ in found]
    if headings != [heading for heading, _ in SECTIONS]:
        problems.append(f"sections {headings}, not {[heading for heading, _ in SECTIONS]}")
    limits = dict(SECTIONS)
    for heading, lines in found:
        limit = limits.get(heading)
        if limit is not None and len(_counted(lines)) > limit:
            problems.append(f"{heading!r} has {len(_counted(lines))} lines, over {limit}")
    quick = dict(found).get("## Quick start", [])
    commands = [c for c in shown_commands("\n".join(quick)) if not c.inline] if quick else []
    if len(FENCE.findall("\n".join(quick))) != 2 or len(commands) != 1:
        problems.append("Quick start: not two command blocks, one of them the training command")
    rows = result_rows(dict(found).get("## Results", []))
    if not 1 <= len(rows) <= MAX_RESULT_ROWS:
        problems.append(f"{len(rows)} result rows, not 1 to {MAX_RESULT_ROWS}")
    for row in rows:
        shown = shown_commands(" | ".join(row))
        outputs = [target for target in LINK.findall(row[-1]) if not re.match(r"[a-z]+:", target)]
        if not shown or any(refusal(command) for command in shown):
            problems.append(f"result row {row[0]!r}: no command that parses")
        if not outputs or not all((ROOT / target.partition("#")[0]).is_file() for target in outputs):
            problems.append(f"result row {row[0]!r}: its last cell links no committed output")
    return problems


def test_the_readme_has_the_front_doors_shape():
    assert shape_problems(README.read_text(encoding="utf-8")) == []


def test_the_shape_check_sees_a_readme_out_of_shape():
    text = README.read_text(encoding="utf-8")
    found = sections(text)
    results = dict(found)["## Results"]
    row = next(line for line in results if line.startswith("| ") and "`python bench/" in line)
    swapped = text.replace("## Resume", "## Resume-x").replace("## Results", "## Resume").replace(
        "## Resume-x", "## Results")
    assert any(p.startswith("sections ") for p in shape_problems(swapped))
    long = text.replace(row, "\n".join([row] * (MAX_RESULT_ROWS + 1)))
    assert f"{len(result_rows(results)) + MAX_RESULT_ROWS} result rows, not 1 to {MAX_RESULT_ROWS}" in \
        shape_problems(long)
    assert any("bytes, over" in p for p in shape_problems(text + "x" * MAX_BYTES))
    bad_flag = text.replace(row, row.replace("`python bench/", "`python bench/no_such_script.py --x` `python bench/"))
    assert any("no command that parses" in p for p in shape_problems(bad_flag))
    no_output = text.replace(row, row.rsplit("|", 2)[0] + "| none |")
    assert any("links no committed output" in p for p in shape_problems(no_output))
    wordy = text.replace("## Resume\n", "## Resume\n\none\ntwo\nthree\nfour\n")
    assert any(p.startswith("'## Resume' has ") for p in shape_problems(wordy))
