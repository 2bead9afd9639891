"""Every command README.md and docs/*.md show still parses against today's parsers: the product's
commands (``python train_ppo_lstm.py``, ``train-ppo-lstm``, ``python train_ppo_lstm_distributed.py``,
``torchrun ... train_ppo_lstm.py``, ``evaluate-ppo-lstm``, ``predict-ppo-lstm``, ``export-ppo-lstm``,
``walkforward-ppo-lstm``, ``tune-ppo-lstm``, ``serve-ppo-lstm``, their ``python -m ppo_lstm.X``
forms and ``python -m ppo_lstm.plot_training``) with the parsers that docs/make_flags.py builds,
and the benchmarks (``python bench/X.py ...``) with each script's own parser. Nothing is run:
only the parsers read the commands. How commands are found, and what is left out or filled in
(shell operators, redirections, placeholders), is in ``doc_commands.py``.

Where argparse must be lenient:

- with ``--config FILE`` the file may give the required flags (``--config run.yaml`` holding
  ``checkpoint:``), as the commands' own reading of the file allows: required flags are not
  required then; every flag given must still exist and take its value;
- inline code that names a command with a flag or two (``predict-ppo-lstm --state``,
  ``evaluate-ppo-lstm --plot``) shows no whole command: its flags must exist, but nothing is
  required and the last flag may go without its value. A benchmark's inline command (a table
  cell) is checked whole.
"""
from __future__ import annotations

import pytest

import known_doc_failures
from doc_commands import PAGES, PLOT_TRAINING, ROOT, TRAIN, Command, make_flags, refusal, shown_commands
from known_doc_failures import KNOWN_DOC_FAILURES, assert_known


def _commands(page) -> list[Command]:
    return shown_commands(page.read_text(encoding="utf-8"), str(page.relative_to(ROOT)))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_shown_command_parses(page):
    failures = {command.text: f"{command.where}: {command.text!r}: {why}" for command in _commands(page)
                if (why := refusal(command))}
    assert_known(str(page.relative_to(ROOT)), "command", failures)


def test_the_pages_show_every_command():
    """The search finds what the pages show: each command, and many of them (so a change in how
    pages write commands cannot make this check pass by finding none)."""
    programs = [command.program for page in PAGES for command in _commands(page)]
    titles = {title for title, *_ in make_flags().COMMANDS}
    assert titles | {PLOT_TRAINING} <= set(programs), (titles | {PLOT_TRAINING}) - set(programs)
    assert programs.count(TRAIN) > 20  # 61 when this was written; pages may shrink, not to nothing
    assert sum(program.startswith("bench/") for program in programs) > 10  # 102 then


def test_the_search_finds_commands_through_the_shell():
    text = ("# Title\n\n```bash\n"
            "pip install -e . && python train_ppo_lstm.py --episodes 8 --num-envs 2   # a comment\n"
            "OMP_NUM_THREADS=1 torchrun --nproc-per-node 2 train_ppo_lstm.py --no-such-flag 2>&1 | tee log.txt\n"
            "cd runs && evaluate-ppo-lstm --checkpoint runs/a --data prices.csv > out.txt; echo done\n"
            "predict-ppo-lstm --model a.onnx --data prices.csv \\\n    --json >> decisions.jsonl\n"
            "python -m ppo_lstm.walkforward --config wf.yaml\n"
            "python bench/scaling.py --episodes 512 --flags \"--num-envs 8\"\n"
            "python docs/make_flags.py --check\n"
            "./train_ppo_lstm.py --episodes 2\n"
            "```\n\n"
            "```text\nReproduce it: evaluate-ppo-lstm --checkpoint checkpoints/best.pt --episodes 32 --seed 1\n```\n\n"
            "```python\nsubprocess.run(['train-ppo-lstm', '--bad'])\n```\n\n"
            "    python -m ppo_lstm.evaluate --checkpoint /tmp/a --data a.csv b.csv \\\n"
            "        --start 2017-09-27\n\n"
            "A map names `evaluate-ppo-lstm` and `train_ppo_lstm.py`; `serve-ppo-lstm --model` is a flag.\n\n"
            "| row | `python bench/learning.py --seeds 3` |\n")
    found = [(c.line, c.program, c.args, c.inline) for c in shown_commands(text)]
    assert found == [
        (4, TRAIN, ["--episodes", "8", "--num-envs", "2"], False),
        (5, TRAIN, ["--no-such-flag"], False),
        (6, "evaluate-ppo-lstm", ["--checkpoint", "runs/a", "--data", "prices.csv"], False),
        (7, "predict-ppo-lstm", ["--model", "a.onnx", "--data", "prices.csv", "--json"], False),
        (9, "walkforward-ppo-lstm", ["--config", "wf.yaml"], False),
        (10, "bench/scaling.py", ["--episodes", "512", "--flags", "--num-envs 8"], False),
        (12, TRAIN, ["--episodes", "2"], False),
        (16, "evaluate-ppo-lstm", ["--checkpoint", "checkpoints/best.pt", "--episodes", "32", "--seed", "1"], False),
        (23, "evaluate-ppo-lstm", ["--checkpoint", "/tmp/a", "--data", "a.csv", "b.csv", "--start", "2017-09-27"],
         False),
        (26, "serve-ppo-lstm", ["--model"], True),
        (28, "bench/learning.py", ["--seeds", "3"], True),
    ]
    refused = [(c.where, refusal(c)) for c in shown_commands(text) if refusal(c)]
    assert len(refused) == 1 and refused[0][0] == "page.md:5" and "unrecognized arguments: --no-such-flag" in \
        refused[0][1]


def _why(program: str, *args: str, inline: bool = False):
    return refusal(Command("page.md", 1, program, list(args), inline))


def test_the_check_refuses_what_todays_parsers_refuse():
    assert _why(TRAIN, "--episodes", "8") is None
    assert "unrecognized arguments: --no-such-flag" in _why(TRAIN, "--no-such-flag")
    assert "invalid choice: 'nope'" in _why(TRAIN, "--market", "nope")
    assert "invalid int value: 'many'" in _why(TRAIN, "--num-envs", "many")
    assert "required: --checkpoint" in _why("evaluate-ppo-lstm", "--data", "prices.csv")
    assert "expected one argument" in _why("evaluate-ppo-lstm", "--checkpoint", "a", "--plot")
    assert "not allowed with" in _why("predict-ppo-lstm", "--checkpoint", "a", "--model", "b", "--data", "c")
    assert "unrecognized arguments: --bad" in _why(PLOT_TRAINING, "--checkpoint-dir", "r", "--bad")
    assert "unrecognized arguments: --bad" in _why("evaluate-ppo-lstm", "--config", "x.yaml", "--bad")
    assert "unrecognized arguments: --config" in _why("export-ppo-lstm", "--config", "x.yaml")  # takes no file
    assert "unrecognized arguments: --bad" in _why("serve-ppo-lstm", "--bad", "--model", inline=True)
    assert _why(TRAIN, "--help") is None and _why("tune-ppo-lstm", "--help") is None


def test_the_check_lets_a_page_leave_out_what_it_must():
    assert _why("evaluate-ppo-lstm", "--config", "backtest.toml") is None  # the file gives --checkpoint
    assert _why("evaluate-ppo-lstm", "--plot", inline=True) is None  # a flag named in prose
    assert _why(TRAIN, "--num-envs", "N", "--market", "MARKET", "--fee-bps", "F") is None  # placeholders
    assert _why(TRAIN, "--distributed", "[--num-gpus", "N]") is None  # usage brackets
    assert _why("tune-ppo-lstm", "--data", "regime.csv", "...", "--trials", "8") is None  # "and more"
    assert "invalid int value: 'many'" in _why(TRAIN, "--num-envs", "N", "--episodes", "many")


def test_the_check_refuses_a_bad_benchmark_command():
    assert _why("bench/scaling.py", "--episodes", "512", "--flags", "--num-envs 8") is None
    assert "unrecognized arguments: --no-such-flag" in _why("bench/learning.py", "--no-such-flag")
    assert "unrecognized arguments: --no-such-flag" in _why("bench/learning.py", "--no-such-flag", inline=True)
    assert "invalid int value" in _why("bench/scaling.py", "--episodes", "many")
    assert _why("bench/no_such_bench.py") == "no such script: bench/no_such_bench.py"


def test_the_known_failures_name_pages_and_checks():
    pages = {str(page.relative_to(ROOT)) for page in PAGES}
    assert all(page in pages and check in ("command", "earlier state") for page, check, _ in KNOWN_DOC_FAILURES)


def test_the_known_failures_let_through_only_what_they_list(monkeypatch):
    monkeypatch.setattr(known_doc_failures, "KNOWN_DOC_FAILURES", frozenset({("a.md", "command", "x --old")}))
    assert_known("a.md", "command", {"x --old": "refused"})
    assert_known("b.md", "command", {})
    with pytest.raises(AssertionError, match="x --new"):
        assert_known("a.md", "command", {"x --old": "refused", "x --new": "x --new: refused"})
    with pytest.raises(AssertionError, match="take them out of KNOWN_DOC_FAILURES"):
        assert_known("a.md", "command", {})
