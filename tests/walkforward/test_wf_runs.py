"""The walk-forward command end to end (subprocesses, tiny nets): no test bar leaks into
training, SIGTERM then a rerun ends with the report of an uninterrupted run (--jobs 2 on
the rerun), and the report files hold what the jobs traded."""
from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import Run, assert_models_equal, load_state, wait_for

pytestmark = pytest.mark.e2e

WF = [sys.executable, "-m", "ppo_lstm.walkforward"]
TINY = ["--folds", "2", "--test-size", "20", "--seeds", "1", "--episodes", "12", "--num-envs", "2",
        "--update-interval", "32", "--episode-length", "16", "--window", "8", "--hidden-size", "8", "--lstm-size", "8",
        "--minibatches", "2", "--checkpoint-interval", "4", "--device", "cpu", "--threads", "1", "--no-progress",
        "--market", "regime", "--seed", "3"]
BARS, FOLD2_TEST = 220, slice(200, 220)


def write_walk(path: Path, bump: float = 1.0) -> Path:
    """A daily random walk; ``bump`` scales the prices of fold 2's test window only."""
    rng = np.random.default_rng(7)
    close = 100 * np.exp(np.cumsum(0.01 * rng.standard_normal(BARS)))
    open_ = np.r_[100.0, close[:-1]]
    scale = np.ones(BARS)
    scale[FOLD2_TEST] = bump
    frame = pd.DataFrame({"Date": pd.bdate_range("2018-01-01", periods=BARS).strftime("%Y-%m-%d"),
                          "Open": open_ * scale, "High": np.maximum(open_, close) * 1.003 * scale,
                          "Low": np.minimum(open_, close) * 0.997 * scale, "Close": close * scale, "Volume": 1})
    frame.to_csv(path, index=False)
    return path


def walkforward(cwd: Path, data: Path, out: str, *extra: str, timeout: float = 240.0):
    return Run(cwd, ["--data", data, "--out", out, *TINY, *extra], launcher=WF).wait(timeout)


@pytest.fixture(scope="module")
def first(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An uninterrupted walk-forward (2 folds x 1 seed) on the plain file; returns its cwd."""
    cwd = tmp_path_factory.mktemp("wf")
    result = walkforward(cwd, write_walk(cwd / "walk.csv"), "a")
    assert result.returncode == 0, result.output[-3000:]
    assert result.stdout.splitlines()[-2].startswith("Edge over buy-and-hold: ")
    return cwd


def test_no_test_bar_reaches_training(first: Path) -> None:
    cwd = first
    result = walkforward(cwd, write_walk(cwd / "bumped.csv", bump=1.5), "b")
    assert result.returncode == 0, result.output[-3000:]
    for job in ("fold01-seed3", "fold02-seed3"):  # fold 2's test bars changed: no fold's weights may
        a, b = (load_state(cwd / out / "jobs" / job / "checkpoints" / "best.pt") for out in ("a", "b"))
        assert_models_equal(a["model"], b["model"])
    oos_a, oos_b = (pd.read_csv(cwd / out / "oos_returns.csv") for out in ("a", "b"))
    assert np.array_equal(oos_a["seed_3"][:20], oos_b["seed_3"][:20])
    assert not np.array_equal(oos_a["buy_and_hold"][20:], oos_b["buy_and_hold"][20:])  # the test bars did change


def test_sigterm_then_rerun_gives_the_uninterrupted_report(first: Path, tmp_path: Path) -> None:
    data = write_walk(tmp_path / "walk.csv")
    run = Run(tmp_path, ["--data", data, "--out", "c", *TINY], launcher=WF)
    job = tmp_path / "c" / "jobs" / "fold01-seed3" / "checkpoints"
    wait_for(lambda: any(job.glob("checkpoint_u*.pt")), 120, "the first job's first checkpoint", run)
    run.signal(signal.SIGTERM)
    stopped = run.wait(60)
    assert stopped.returncode == 143, stopped.output[-2000:]
    assert not (tmp_path / "c" / "jobs" / "fold02-seed3" / "test.json").exists()
    assert not (job.parent / "test.json").exists()  # stopped inside the first job
    result = Run(tmp_path, ["--data", data, "--out", "c", *TINY, "--jobs", "2"], launcher=WF).wait(240)
    assert result.returncode == 0, result.output[-3000:]
    assert "Resumed from" in (job.parent / "stdout.txt").read_text()
    ours, theirs = (json.loads((d / "summary.json").read_text()) for d in (tmp_path / "c", first / "a"))
    assert ours["verdict"] == theirs["verdict"] and ours["figures"] == theirs["figures"]
    assert (tmp_path / "c" / "oos_returns.csv").read_text() == (first / "a" / "oos_returns.csv").read_text()


def test_the_report_files_hold_what_the_jobs_traded(first: Path) -> None:
    out = first / "a"
    oos = pd.read_csv(out / "oos_returns.csv")
    assert len(oos) == 40 and list(oos["fold"]) == [1] * 20 + [2] * 20
    traded = [json.loads((out / "jobs" / f"fold0{k}-seed3" / "test.json").read_text()) for k in (1, 2)]
    stitched = np.concatenate([t["instruments"]["walk.csv"]["returns"] for t in traded])
    assert np.array_equal(oos["seed_3"].to_numpy(), stitched)
    assert np.array_equal(oos["ensemble"].to_numpy(), stitched)  # one seed: the ensemble is that agent
    assert np.all(oos["flat"] == 0.0)
    rows = pd.read_csv(out / "walkforward.csv")
    assert len(rows) == 2 * 2 and set(rows["seed"].astype(str)) == {"3", "ensemble"}
    summary = json.loads((out / "summary.json").read_text())
    assert summary["periods_per_year"] == 261.0  # business days, no holidays: the file's own calendar
    r = oos["buy_and_hold"].to_numpy()
    overall = summary["figures"]["buy_and_hold"]["overall"]
    assert overall["total_return"] == pytest.approx(np.prod(1 + r) - 1, rel=1e-12)
    assert overall["sharpe"] == pytest.approx(r.mean() / r.std(ddof=1) * np.sqrt(261), rel=1e-9)
    report = (out / "report.md").read_text()
    assert summary["verdict"].startswith("Edge over buy-and-hold: ") and summary["verdict"] in report
    assert (out / "report.png").stat().st_size > 10_000
    assert (out / "jobs" / "fold01-seed3" / "training.log").stat().st_size > 0
