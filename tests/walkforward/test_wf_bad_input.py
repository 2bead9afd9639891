"""Bad input to the walk-forward (ppo_lstm.walkforward.cli.main, in-process, fast): one
line on stderr, exit code 2, no job started and nothing of an earlier walk-forward lost."""
from __future__ import annotations

import re

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ppo_lstm.walkforward.cli import main
from ppo_lstm.walkforward.state import STATE_NAME

SMALL = ["--window", "8", "--episode-length", "16", "--num-envs", "2", "--update-interval", "32", "--minibatches", "2"]


@pytest.fixture
def data(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    close = 100 * np.exp(np.cumsum(0.01 * rng.standard_normal(300)))
    frame = pd.DataFrame({"Date": pd.bdate_range("2018-01-01", periods=300).strftime("%Y-%m-%d"), "Open": close,
                          "High": close * 1.01, "Low": close * 0.99, "Close": close})
    path = tmp_path / "walk.csv"
    frame.to_csv(path, index=False)
    return path


def run(*args: object) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main([str(a) for a in args])
        except SystemExit as stop:
            code = int(stop.code or 0)
    lines = [line for line in err.getvalue().splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return code, lines[0]


@pytest.mark.parametrize("args, message", [
    (["--out", "{out}"], "a walk-forward needs --data"),
    (["--data", "{data}", "--out", "{out}", "--folds", "4", "--test-size", "80"],
     r"4 folds of --test-size 80 bars after --purge 0 need more bars than the 300 selected"),
    (["--data", "{data}", "--out", "{out}", "--folds", "2", "--test-size", "9"],
     r"holds 9 bars of walk.csv; a test window needs at least window \+ 2 = 10"),
    (["--data", "{data}", "--out", "{out}", "--purge", "-1"], r"--purge must be >= 0"),
    (["--data", "{data}", "--out", "{out}", "--time-limit", "1h"], r"--time-limit would end each job's training early"),
    (["--data", "{data}", "--out", "{out}", "--train-for", "1h"], r"--train-for would size each job's episodes"),
    (["--data", "{data}", "--out", "{out}", "--scheme", "rolling"], r"--scheme rolling needs --train-size"),
    (["--data", "{data}", "--out", "{out}", "--distributed", "--jobs", "2"], r"one job at a time"),
    (["--data", "{data}", "--out", "{out}", "--test-size", "1 year"], r"neither a count of bars"),
    (["--data", "{data}", "--out", "{out}", "--folds", "20", "--test-size", "1y"],
     r"20 folds of --test-size 1y after --purge 0 need more bars than the 300 selected"),
    (["--data", "{data}", "--out", "{out}", "--folds", "2", "--test-size", "100"],
     r"fold 1 \(training bars .*\): .* bars .* left for training"),
    (["--data", "{data}", "--out", "{out}", "--folds", "2", "--test-size", "20", "--tuned-span", "2019-01"],
     r"tuned-span '2019-01': give START..END"),
    (["--data", "{data}", "--out", "{out}", "--folds", "2", "--test-size", "20", "--tuned-span",
      "2018-01-01..2019-01-10", "--data-end", "2019-01-08"],  # the tuning bars go on past --data-end
     r"fold 1's test window 2018-11-14..2018-12-11 overlaps the bars the study tuned on \(2018-01-01..2019-01-10, from "
     r"tuned-span\), so it is not out of sample; every test window must start after 2019-01-10: walk forward on later "
     r"bars: --data-start 2019-01-11 \(and a --data-end after it\), or test fewer"),
])
def test_bad_input_is_one_line_and_exit_2(data: Path, tmp_path: Path, args: list[str], message: str) -> None:
    out = tmp_path / "out"
    code, line = run(*[a.format(data=data, out=out) for a in args], *SMALL, "--episode-length", "150")
    assert code == 2 and line.startswith("error: ") and re.search(message, line), line
    assert not (out / "jobs").exists()


def test_another_walk_forward_in_the_output_dir_is_refused_and_kept(data: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "jobs" / "fold01-seed1").mkdir(parents=True)
    code, line = run("--data", data, "--out", out, "--folds", "2", "--test-size", "20", *SMALL)
    assert code == 2 and "holds jobs of another walk-forward" in line
    (out / "jobs" / "fold01-seed1").rmdir()
    (out / "jobs").rmdir()
    from ppo_lstm.walkforward.cli import parse_command_line
    from ppo_lstm.walkforward.state import check_or_write
    command = parse_command_line(["--data", str(data), "--out", str(out), "--folds", "2", "--test-size", "20", *SMALL])
    check_or_write(out, command.wf, command.train, [str(data)])
    saved = (out / STATE_NAME).read_text()
    code, line = run("--data", data, "--out", out, "--folds", "3", "--test-size", "20", *SMALL)
    assert code == 2 and "holds a walk-forward with other settings (folds 2 -> 3)" in line
    data.write_text(data.read_text().replace("2018-01-01", "2017-12-29"))
    code, line = run("--data", data, "--out", out, "--folds", "2", "--test-size", "20", *SMALL)
    assert code == 2 and "changed since it started" in line
    assert (out / STATE_NAME).read_text() == saved and json.loads(saved)["settings"]["walkforward"]["folds"] == 2


def test_a_tuned_span_in_the_config_file_refuses_test_windows_among_its_bars(data: Path, tmp_path: Path) -> None:
    """best.yaml of tune-ppo-lstm carries tuned-span: the walk-forward reads it as --tuned-span."""
    config = tmp_path / "best.yaml"
    config.write_text(f"data: {data}\ntuned-span: 2018-01-01T00:00:00..2018-12-31T00:00:00\n")
    args = ["--config", config, "--out", tmp_path / "out", "--folds", "2", "--test-size", "20", *SMALL]
    code, line = run(*args)
    assert code == 2 and line.startswith("error: fold 1's test window 2018-12-31..2019-01-25 overlaps the bars the "
                                         "study tuned on (2018-01-01..2018-12-31, from tuned-span)"), line
    assert "--data-start 2019-01-01" in line and not (tmp_path / "out").exists()


def test_a_walk_forward_saved_before_rate_cap_resumes_at_the_cap_its_jobs_trained_with(data: Path, tmp_path: Path) -> None:
    """walkforward.json written before --rate-cap: its jobs trained at x8, so the default x4 is a change
    (named, with the flag that resumes it), and --rate-cap 8 resumes it."""
    from ppo_lstm.walkforward.cli import parse_command_line
    from ppo_lstm.walkforward.state import check_or_write
    out = tmp_path / "out"
    args = ["--data", str(data), "--out", str(out), "--folds", "2", "--test-size", "20", *SMALL]
    command = parse_command_line(args)
    check_or_write(out, command.wf, command.train, [str(data)])
    state = json.loads((out / STATE_NAME).read_text())
    del state["settings"]["train"]["rate_cap"], state["settings"]["train"]["batch_rule"], state["settings_format"]
    del state["settings"]["train"]["schedule_rule"]
    (out / STATE_NAME).write_text(json.dumps(state))  # as format 1 wrote it: its jobs also ran batch rule 2
    code, line = run(*args)
    assert code == 2 and "other settings (batch-rule 2 -> 3, rate-cap 8.0 -> 4.0, schedule-rule 1 -> 2)" in line, line
    again = parse_command_line([*args, "--rate-cap", "8", "--batch-rule", "2", "--schedule-rule", "1"])
    check_or_write(out, again.wf, again.train, [str(data)])  # the same settings: no error


def test_a_walk_forward_saved_before_ema_spans_resumes_without_the_entry(data: Path, tmp_path: Path) -> None:
    """walkforward.json written before --ema-spans and --feature-window: its jobs trained without an EMA
    entry, so the default span 500 is a change (named), and --ema-spans none resumes it."""
    from ppo_lstm.walkforward.cli import parse_command_line
    from ppo_lstm.walkforward.state import check_or_write
    out = tmp_path / "out"
    args = ["--data", str(data), "--out", str(out), "--folds", "2", "--test-size", "20", *SMALL]
    command = parse_command_line([*args, "--ema-spans", "none"])
    check_or_write(out, command.wf, command.train, [str(data)])
    state = json.loads((out / STATE_NAME).read_text())
    assert state["settings"]["train"]["env"]["ema_spans"] is None
    del state["settings"]["train"]["env"]["ema_spans"], state["settings"]["train"]["env"]["feature_window"]
    del state["settings"]["train"]["batch_rule"], state["settings"]["train"]["schedule_rule"]  # as format 1 wrote it
    del state["settings_format"]
    (out / STATE_NAME).write_text(json.dumps(state))
    code, line = run(*args)
    assert code == 2 and "other settings (batch-rule 2 -> 3, ema-spans None -> 500, schedule-rule 1 -> 2)" in line, line
    again = parse_command_line([*args, "--ema-spans", "none", "--batch-rule", "2", "--schedule-rule", "1"])
    check_or_write(out, again.wf, again.train, [str(data)])  # the same settings: no error


def test_print_config_prints_the_walk_forward_and_training_settings(data: Path, tmp_path: Path, capsys) -> None:
    code = main(["--data", str(data), "--out", str(tmp_path / "out"), "--folds", "2", "--test-size", "20", *SMALL,
                 "--print-config"])
    assert code == 0
    text = capsys.readouterr().out
    assert "num-envs: 2" in text and "update-interval: 32" in text and "folds: 2" in text
    assert not (tmp_path / "out").exists()  # printed, nothing started
