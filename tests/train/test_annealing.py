"""The learning rates' annealing follows the run's progress (its env steps, or its finished episodes
where those are further), so a resume onto another batch (more envs, or another worker count) goes on
from where the run is, not from 0."""
from __future__ import annotations

import csv
from pathlib import Path

import pytest

from conftest import TINY, cli_in_process, copy_checkpoint
from ppo_lstm.config.plan import learning_rates
from ppo_lstm.config.command_line import parse_command_line

# TINY's batch is 32 transitions (2 envs x 16 steps); episodes are 16 steps long
BIGGER = ["--update-interval", "64"]


def rows(run: Path) -> list[dict[str, str]]:
    with open(run / "checkpoints" / "metrics.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def test_a_resume_onto_a_larger_batch_anneals_from_where_the_run_is(tmp_path: Path):
    first = tmp_path / "first"
    first.mkdir()
    assert cli_in_process(first, *TINY, "--episodes", "16", "--checkpoint-interval", "8").returncode == 0
    resumed = tmp_path / "resumed"
    copy_checkpoint(first / "checkpoints", "checkpoint_u00000004.pt", resumed / "checkpoints")  # episode 8
    result = cli_in_process(resumed, *TINY, *BIGGER, "--episodes", "16", "--resume")
    assert result.returncode == 0, result.output
    assert "Resumed from checkpoints/checkpoint_u00000004.pt at episode 8/16" in result.stdout

    after = [r for r in rows(resumed) if int(r["update"]) > 4]
    start = learning_rates(parse_command_line([*TINY, *BIGGER]).config)[0]
    # 128 of the run's 256 env steps were done: the first update after the resume runs at half the rate,
    # where the update count (4 of the 4 updates the larger batch makes) gave 0
    assert [float(r["lr_actor"]) for r in after] == pytest.approx([start * (1 - k / 4) for k in (2, 3)])


def test_a_fresh_run_anneals_by_update_as_before(tmp_path: Path):
    """Update u of U runs at rate x (1 - u / U): the env-step clock gives the same bits on a fresh run."""
    assert cli_in_process(tmp_path, *TINY, "--episodes", "10").returncode == 0
    start = learning_rates(parse_command_line(TINY).config)[0]
    total = 5  # 10 episodes x 16 steps / 32
    assert [float(r["lr_actor"]) for r in rows(tmp_path)] == [start * (1 - u / total) for u in range(total)]
