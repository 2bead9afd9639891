"""tune-ppo-lstm end to end on tiny runs: trials as ordinary run dirs, --jobs processes on
SQLite, the results, resuming, best.yaml back into training, failed trials."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from conftest import cli_in_process
from ppo_lstm.tune.queue import FAIL_REASON
from test_space_and_input import run_main
from tune_fixtures import assert_exactly, start_tune, trials_of, write_space

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

SPACE = "learning-rate-actor: {log-uniform: [1e-4, 1e-2]}\nlstm-size: {choice: [8, 16]}\n"


def settings_of(config_yaml: Path) -> dict:
    values = yaml.safe_load(config_yaml.read_text())
    return {k: v for k, v in values.items() if k not in ("checkpoint-dir", "log-file")}


def test_two_processes_on_sqlite_then_resume_report_and_best_yaml(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    space = write_space(tmp_path / "space.yaml", SPACE)
    args = ["--out", "study", "--space", space, "--trials", "2", "--jobs", "2", "--sampler", "random"]
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
        assert t.user_attrs["periods_per_year"] == 252.0 and "holdout_sharpe" in t.user_attrs
    report = (out / "report.txt").read_text()
    assert "2 trials: 2 complete, 0 pruned, 0 failed" in report and "Top trials" in report
    assert "Parameter importances" in report and (out / "history.png").stat().st_size > 1000
    best = max(trials, key=lambda t: (t.value, -t.number))
    assert f"Best trial: {best.number}," in report

    monkeypatch.chdir(tmp_path)  # in this process: neither command below runs a trial
    code, again, _ = run_main(*args)  # resumes the study: every slot ran, so nothing runs
    assert code == 0 and again.startswith("Study 'study'")
    assert_exactly(trials_of(url, "study"), 2)
    code, shown, _ = run_main("--out", "study", "--report")
    assert code == 0 and shown == report

    # best.yaml trains as it is, with the best trial's settings (the training CLI's main(), in this process)
    train = cli_in_process(tmp_path, "--config", "study/best.yaml", "--checkpoint-dir", "again", "--log-file",
                           "again/training.log", "--device", "cpu", "--no-progress")
    assert train.returncode == 0, train.stderr
    expected = settings_of(out / f"trial-{best.number:04d}" / "config.yaml")
    assert settings_of(tmp_path / "again" / "config.yaml") == expected


def test_invalid_settings_fail_their_trial_and_the_study_goes_on(tmp_path: Path) -> None:
    space = write_space(tmp_path / "space.yaml", "minibatches: {choice: [3]}\n")
    result = start_tune(tmp_path, "--out", "study", "--space", space, "--trials", "2").wait(120)
    assert result.returncode == 0, result.output
    trials = trials_of(f"sqlite:///{tmp_path / 'study' / 'study.db'}", "study")
    assert_exactly(trials, 2)
    for t in trials:
        assert t.state.name == "FAIL"
        assert "--minibatches 3 must divide the 2 env sequences" in t.user_attrs[FAIL_REASON]
    assert "No complete trial yet" in result.stdout and "Failed trials:" in result.stdout
    assert not (tmp_path / "study" / "best.yaml").exists()
