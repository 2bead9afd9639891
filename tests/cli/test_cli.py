"""End to end through the real CLI: log lines, metrics.csv, checkpoints. The script runs in a
subprocess for a training run and --help; the runs that check a feature (a shared log,
resume, TensorBoard, bf16 autocast) go through its main() in this process (``cli_in_process``:
the same code path, without a Python start-up)."""
import csv
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import cli_in_process

ROOT = Path(__file__).resolve().parents[2]
LINE = re.compile(r"^Episode (\d+)/(\d+) - Reward: -?\d+\.\d\d, Return: -?\$\d+\.\d\d, "
                  r"Win Rate: \d+\.\d% \((\d+) closed, (\d+) open\), Steps: \d+$")
TINY = ["--num-envs", "2", "--update-interval", "32", "--episode-length", "16", "--window", "8",
        "--hidden-size", "16", "--lstm-size", "16", "--minibatches", "2"]


def run_cli(cwd, *args, script="train_ppo_lstm.py", timeout=120, python_flags=()):
    return subprocess.run([sys.executable, *python_flags, str(ROOT / script), *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.e2e
def test_trains_logs_and_checkpoints(tmp_path):
    result = run_cli(tmp_path, "--episodes", "12", "--log-interval", "4", "--checkpoint-interval", "6",
                     "--market", "regime", *TINY, python_flags=("-X", "importtime"))
    assert result.returncode == 0, result.stderr
    # pandas (about half a second of a start-up) is imported when a data file is read, tomllib when a
    # TOML config is: this run of a simulated market, hold-outs and checkpoints included, imports neither
    imported = {line.rsplit("|", 1)[1].strip() for line in result.stderr.splitlines()
                if line.startswith("import time:")}
    assert "torch" in imported and not imported & {"pandas", "tomllib"}
    log = (tmp_path / "training.log").read_text().splitlines()
    assert log[0].startswith("# ") and '"episodes": 12' in log[0]  # header records the config
    episode_lines = [line for line in log if line.startswith("Episode ")]
    assert len(episode_lines) == 3
    for line in episode_lines:
        assert LINE.match(line), line
    assert LINE.match(episode_lines[-1]).group(1) == "12"
    assert episode_lines == [line for line in result.stdout.splitlines() if line.startswith("Episode ")]

    run_dir = tmp_path / "checkpoints"
    rows = list(csv.DictReader(open(run_dir / "metrics.csv")))
    assert len(rows) == int(rows[-1]["update"]) >= 6
    for key in ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction", "explained_variance",
                "sps_global", "mean_reward", "win_rate"):
        assert key in rows[0]
    assert float(rows[-1]["sps_global"]) > 0

    latest = (run_dir / "latest").read_text().strip()
    state = torch.load(run_dir / latest, weights_only=True)
    assert state["world_size"] == 1 and state["counters"]["global_episodes"] == 12
    assert not any(key.startswith("module.") for key in state["model"])
    assert (run_dir / "best.pt").exists()
    assert not (run_dir / ".lock").exists()


def test_second_run_appends_to_the_log(tmp_path):
    for directory in ("run-a", "run-b"):  # two runs, each in its own checkpoint dir, one log
        assert cli_in_process(tmp_path, "--episodes", "2", "--log-interval", "2", "--checkpoint-dir", directory,
                              *TINY).returncode == 0
    log = (tmp_path / "training.log").read_text()
    assert log.count(" run started ") == 2 and log.count("Episode 2/2") == 2


def test_resume_continues_to_the_new_total(tmp_path):
    assert cli_in_process(tmp_path, "--episodes", "4", *TINY).returncode == 0
    result = cli_in_process(tmp_path, "--episodes", "8", "--resume", "--log-interval", "4", *TINY)
    assert result.returncode == 0, result.stderr
    assert "Resumed from " in result.stdout and "at episode 4/8" in result.stdout and "4 episodes left" in result.stdout
    assert "Episode 8/8" in result.stdout


@pytest.mark.e2e
def test_help_lists_every_flag_with_defaults(tmp_path):
    result = run_cli(tmp_path, "--help")
    assert result.returncode == 0
    for flag in ("--episodes", "--update-interval", "--num-envs", "--learning-rate-actor", "--learning-rate-critic",
                 "--gamma", "--gae-lambda", "--clip", "--epochs", "--minibatches", "--checkpoint-interval",
                 "--checkpoint-dir", "--resume", "--data", "--seed", "--device", "--log-file", "--window",
                 "--episode-length", "--max-position", "--no-short", "--fee-bps", "--slippage-bps",
                 "--distributed", "--num-gpus", "--num-workers", "--backend", "--master-addr", "--master-port",
                 "--dist-timeout", "--sync-check-interval", "--date-format", "--data-all-ranks"):
        assert flag in result.stdout, flag
    assert "(default: checkpoints)" in result.stdout and "(default: training.log)" in result.stdout


def test_bad_update_interval_is_one_line_exit_2(tmp_path):
    result = cli_in_process(tmp_path, "--update-interval", "30", "--num-envs", "4")
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and "--update-interval 30" in result.stderr
    assert "Traceback" not in result.stderr


def test_tensorboard_curves_when_installed(tmp_path):
    pytest.importorskip("tensorboard")
    result = cli_in_process(tmp_path, "--episodes", "4", "--tensorboard", *TINY)
    assert result.returncode == 0, result.stderr
    assert list((tmp_path / "checkpoints" / "tb").glob("events.out.tfevents.*"))


def test_autocast_bf16_trains_and_records_it(tmp_path):
    """--autocast bf16 end to end on the CPU: trains and checkpoints float32 weights, and the
    setting is recorded in the log header and the checkpoint (so a resume keeps it)."""
    result = cli_in_process(tmp_path, "--episodes", "8", "--autocast", "bf16", "--device", "cpu", *TINY)
    assert result.returncode == 0, result.stderr
    assert '"autocast": "bf16"' in (tmp_path / "training.log").read_text().splitlines()[0]
    from conftest import load_state

    checkpoints = tmp_path / "checkpoints"
    saved = load_state(checkpoints / (checkpoints / "latest").read_text().strip())
    assert saved["config"]["autocast"] == "bf16"
    assert all(t.dtype == torch.float32 for t in saved["model"].values())  # the weights stay float32


def test_unknown_autocast_is_one_line_exit_2(tmp_path):
    result = cli_in_process(tmp_path, "--autocast", "fp8")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "--autocast" in result.stderr
