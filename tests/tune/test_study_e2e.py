"""tune-ppo-lstm end to end on tiny runs: trials as ordinary run dirs, --jobs processes on
SQLite, the results, resuming, best.yaml back into training and into the walk-forward, failed
trials."""
from __future__ import annotations

import contextlib
import csv
import io
import math
from pathlib import Path

import numpy as np
import optuna
import pandas as pd
import pytest
import yaml

from conftest import cli_in_process
from ppo_lstm.tune.queue import FAIL_REASON
from ppo_lstm.tune.storage import SPAN_ATTR
from test_space_and_input import run_main
from tune_fixtures import assert_exactly, start_tune, trials_of, write_space

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

SPACE = "learning-rate-actor: {log-uniform: [1e-4, 1e-2]}\nlstm-size: {choice: [8, 16]}\n"


def settings_of(config_yaml: Path) -> dict:
    values = yaml.safe_load(config_yaml.read_text())
    return {k: v for k, v in values.items() if k not in ("checkpoint-dir", "log-file")}


def write_prices(path: Path, bars: int) -> pd.DatetimeIndex:
    rng = np.random.default_rng(0)
    close = 100 * np.exp(np.cumsum(0.01 * rng.standard_normal(bars)))
    dates = pd.bdate_range("2018-01-01", periods=bars)
    pd.DataFrame({"Date": dates.strftime("%Y-%m-%d"), "Open": close, "High": close * 1.01, "Low": close * 0.99,
                  "Close": close}).to_csv(path, index=False)
    return dates


def walk_forward(*args: str) -> tuple[int, str]:
    from ppo_lstm.walkforward.cli import main as walkforward_main
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = walkforward_main(list(args))
    return code, err.getvalue().strip()


def test_two_processes_on_sqlite_then_resume_report_and_best_yaml(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    space = write_space(tmp_path / "space.yaml", SPACE)
    dates = write_prices(tmp_path / "prices.csv", 400)  # the study reads the first 300 bars; 60 are its hold-out
    args = ["--out", "study", "--space", space, "--trials", "2", "--jobs", "2", "--sampler", "random",
            "--data", "prices.csv", "--data-end", dates[299].date().isoformat()]
    result = start_tune(tmp_path, *args).wait(240)
    assert result.returncode == 0, result.output
    out = tmp_path / "study"
    url = f"sqlite:///{out / 'study.db'}"
    trials = trials_of(url, "study")
    assert_exactly(trials, 2)
    assert {t.state.name for t in trials} == {"COMPLETE"}
    assert "locked" not in result.output
    for t in trials:  # an ordinary run dir each, trained with the trial's settings
        run = out / f"trial-{t.number:04d}"
        assert {"config.yaml", "metrics.csv", "training.log", "best.pt"} <= {p.name for p in run.iterdir()}
        settings = yaml.safe_load((run / "config.yaml").read_text())
        assert settings["lstm-size"] == t.params["lstm-size"]
        assert settings["learning-rate-actor"] == pytest.approx(t.params["learning-rate-actor"])
        assert 240 < t.user_attrs["periods_per_year"] < 270 and "holdout_sharpe" in t.user_attrs
        # best.pt backtested again: the per-bar alpha Sharpe ratio over the hold-out's scored bars, beside buy-and-hold
        assert math.isfinite(t.user_attrs["holdout_alpha_sharpe"]) and t.user_attrs["holdout_bars"] == 59
        with open(run / "metrics.csv", newline="") as handle:
            held = {row["holdout_buy_and_hold_pct"] for row in csv.DictReader(handle)} - {""}
        assert len(held) == 1 and t.user_attrs["holdout_buy_and_hold_pct"] == float(held.pop())
    span = f"{dates[0].isoformat()}..{dates[299].isoformat()}"
    assert optuna.load_study(study_name="study", storage=url).user_attrs[SPAN_ATTR] == span
    report = (out / "report.txt").read_text()
    assert "2 trials: 2 complete, 0 pruned, 0 failed" in report and "Top trials" in report
    assert "A selection: each seed's best.pt is the best of its run's" in report and "b&h ret" in report
    assert "Parameter importances" in report and (out / "history.png").stat().st_size > 1000
    best = max(trials, key=lambda t: (t.value, -t.number))
    assert f"Best trial: {best.number}," in report

    monkeypatch.chdir(tmp_path)  # in this process: neither command below runs a trial
    code, again, _ = run_main(*args)  # resumes the study: every slot ran, so nothing runs
    assert code == 0 and again.startswith("Study 'study'")
    assert_exactly(trials_of(url, "study"), 2)
    code, shown, _ = run_main("--out", "study", "--report")
    assert code == 0 and shown == report

    # best.yaml trains with the best trial's settings on the file's bars (the training CLI's main(), in this process)
    assert yaml.safe_load((out / "best.yaml").read_text())["tuned-span"] == span
    train = cli_in_process(tmp_path, "--config", "study/best.yaml", "--checkpoint-dir", "again", "--log-file",
                           "again/training.log", "--device", "cpu", "--no-progress")
    assert train.returncode == 0, train.stderr
    expected = settings_of(out / f"trial-{best.number:04d}" / "config.yaml")
    assert expected.pop("data-end") == dates[299].date().isoformat()
    assert settings_of(tmp_path / "again" / "config.yaml") == {**expected, "data-end": None}

    # the walk-forward refuses test windows among the study's bars, from best.yaml or from the study
    wf = ["--out", "wf", "--folds", "2", "--test-size", "60"]  # fold 1 tests bars 280..339
    code, line = walk_forward("--config", "study/best.yaml", *wf)
    window = f"fold 1's test window {dates[280].date()}..{dates[339].date()} overlaps the bars the study tuned on"
    assert code == 2 and line.startswith(f"error: {window} ({dates[0].date()}..{dates[299].date()}, from tuned-span)")
    assert f"--data-start {dates[300].date()}" in line
    code, line = walk_forward("--data", "prices.csv", "--study", "study:study", *wf)
    assert code == 2 and f"from --study study:study)" in line and not (tmp_path / "wf").exists()


def test_invalid_settings_fail_their_trial_and_the_study_goes_on(tmp_path: Path) -> None:
    space = write_space(tmp_path / "space.yaml", "minibatches: {choice: [3]}\n")
    result = start_tune(tmp_path, "--out", "study", "--space", space, "--trials", "2").wait(120)
    assert result.returncode == 0, result.output
    trials = trials_of(f"sqlite:///{tmp_path / 'study' / 'study.db'}", "study")
    assert_exactly(trials, 2)
    for t in trials:
        assert t.state.name == "FAIL"
        assert "--minibatches 3 is more than the 2 env sequences" in t.user_attrs[FAIL_REASON]
    assert "No complete trial yet" in result.stdout and "Failed trials:" in result.stdout
    assert not (tmp_path / "study" / "best.yaml").exists()


def test_a_wall_time_objective_gives_every_trial_the_same_time_limit(tmp_path: Path) -> None:
    space = write_space(tmp_path / "space.yaml", SPACE)
    budget = ["--space", space, "--trials", "2", "--episodes", "100000", "--time-limit", "2s"]
    result = start_tune(tmp_path, "--out", "study", *budget).wait(300)
    assert result.returncode == 0, result.output
    trials = trials_of(f"sqlite:///{tmp_path / 'study' / 'study.db'}", "study")
    assert_exactly(trials, 2)
    assert all(t.state.name == "COMPLETE" and math.isfinite(t.value) for t in trials)
    for t in trials:  # every trial's run stopped at the limit, far short of its episodes, and was scored
        log = (tmp_path / "study" / f"trial-{t.number:04d}" / "training.log").read_text()
        assert "Time limit reached (--time-limit 2s): stopped at episode" in log and "of 100000" in log
    assert "each seed trained for at most 2s of wall time (--time-limit)" in result.stdout
    code, _, err = run_main("--out", str(tmp_path / "study"), *budget[:-1], "5s")  # another budget: refused
    assert code == 2 and 'created with time_limit = "2s", this command gives "5s"' in err


def test_train_for_gives_every_trial_the_same_time_with_its_episodes_fitted(tmp_path: Path) -> None:
    space = write_space(tmp_path / "space.yaml", SPACE)
    budget = ["--space", space, "--trials", "2", "--train-for", "2s"]
    result = start_tune(tmp_path, "--out", "study", *budget).wait(300)
    assert result.returncode == 0, result.output
    trials = trials_of(f"sqlite:///{tmp_path / 'study' / 'study.db'}", "study")
    assert_exactly(trials, 2)
    assert all(t.state.name == "COMPLETE" and math.isfinite(t.value) for t in trials)
    for t in trials:  # every trial's run fitted its episodes to the time (its config file's episodes yield)
        log = (tmp_path / "study" / f"trial-{t.number:04d}" / "training.log").read_text()
        assert "--train-for 2s: at " in log and "episodes fit in the time" in log
        steps = sorted(t.intermediate_values)  # the pruner's steps: ten-thousandths of the time
        assert steps and all(0 <= step < 10_000 for step in steps)
    assert "each seed trained for 2s of wall time, its episodes fitted to it (--train-for)" in result.stdout
    code, _, err = run_main("--out", str(tmp_path / "study"), *budget[:-1], "3s")  # another time: refused
    assert code == 2 and 'created with train_for = "2s", this command gives "3s"' in err


def test_a_space_can_decide_on_ema_spans(tmp_path: Path) -> None:
    """``ema-spans: {choice: ["", "5"]}`` in a space file: each trial trains, and saves, the
    observation its sampled value gives (no spans, or one EMA entry more)."""
    import torch

    space = write_space(tmp_path / "space.yaml", 'ema-spans: {choice: ["", "5"]}\n')
    result = start_tune(tmp_path, "--out", "study", "--space", space, "--trials", "2").wait(300)
    assert result.returncode == 0, result.output
    trials = trials_of(f"sqlite:///{tmp_path / 'study' / 'study.db'}", "study")
    assert_exactly(trials, 2)
    for t in trials:
        state = torch.load(tmp_path / "study" / f"trial-{t.number:04d}" / "best.pt", weights_only=False)
        assert (state["config"]["env"]["ema_spans"] or "") == t.params["ema-spans"]
        assert state["model"]["encoder.0.weight"].shape[1] == 8 + 3 + (1 if t.params["ema-spans"] else 0)
