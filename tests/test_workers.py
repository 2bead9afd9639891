"""Workers, devices and threads: how many workers a job gets, on what, with how many
torch threads each, and what the job says about them.

 - Threads: every worker runs 1 intra-op torch thread unless ``--threads`` or
   ``OMP_NUM_THREADS`` says otherwise (torch's default, one per core, thrashes on a
   busy CPU); the ``Workers:`` start-up line reports what the worker really uses.
 - Devices: with ``--device auto``/``cuda`` an explicit ``--num-gpus N`` counts GPUs and
   asking for more than are visible is a one-line start-up error naming the CPU
   alternative; with ``--device cpu`` it counts CPU workers, and more CPU workers than
   cores get one warning.
 - Log lines: ``| Workers: N`` on CPU, ``| GPUs: N`` on GPUs.
"""
from __future__ import annotations

import os
import sys

import pytest
import torch

from conftest import SPAWN2, TINY, TRAIN, episode_lines, run_cli
from ppo_lstm.config import TrainConfig, validate
from ppo_lstm.distributed import threads_per_worker
from ppo_lstm.errors import UsageError

pytestmark = pytest.mark.timeout(180)

# TINY without its --device cpu, for the device tests
TINY_ANY_DEVICE = [a for i, a in enumerate(TINY) if a != "--device" and (i == 0 or TINY[i - 1] != "--device")]


def startup_line(stdout: str) -> str:
    lines = [line for line in stdout.splitlines() if line.startswith("Workers: ")]
    assert len(lines) == 1, stdout
    return lines[0]


# ----------------------------------------------------------------------------- threads


@pytest.mark.parametrize("flag, omp, expected", [
    (None, None, 1),  # the default: one thread, whatever the core count
    (None, "", 1),
    (None, "3", 3),
    (None, "4,2", 4),  # OpenMP's nested list: the outer level
    (None, "zero", 1),  # not a count: ignored
    (None, "0", 1),
    (2, None, 2),
    (2, "3", 2),  # --threads wins over OMP_NUM_THREADS
])
def test_threads_per_worker_rule(flag, omp, expected):
    environ = {} if omp is None else {"OMP_NUM_THREADS": omp}
    assert threads_per_worker(TrainConfig(threads=flag), environ) == expected


def test_threads_must_be_positive():
    with pytest.raises(UsageError, match="--threads must be at least 1, got 0"):
        validate(TrainConfig(threads=0))


@pytest.mark.parametrize("args, env, expected", [
    ([], {"OMP_NUM_THREADS": None}, "Workers: 1 on cpu, 1 torch thread"),
    ([], {"OMP_NUM_THREADS": "2"}, "Workers: 1 on cpu, 2 torch threads"),
    (["--threads", "3"], {"OMP_NUM_THREADS": "2"}, "Workers: 1 on cpu, 3 torch threads"),
], ids=["default", "omp", "flag"])
def test_single_device_run_uses_one_thread_unless_told(cwd, args, env, expected):
    """A single-device CPU run used to keep torch's default (one thread per core)."""
    result = run_cli(cwd, *TINY, "--episodes", "2", *args, env=env)
    assert result.returncode == 0, result.output
    assert startup_line(result.stdout) == expected


def test_spawned_cpu_workers_use_one_thread_each(cwd):
    result = run_cli(cwd, *TINY, *SPAWN2, "--episodes", "4", env={"OMP_NUM_THREADS": None})
    assert result.returncode == 0, result.output
    assert startup_line(result.stdout) == "Workers: 2 on cpu (gloo), 1 torch thread each"


def test_zero_threads_is_one_line_exit_2(cwd):
    result = run_cli(cwd, *TINY, "--episodes", "2", "--threads", "0", timeout=60)
    assert result.returncode == 2
    assert result.error_lines() == ["error: --threads must be at least 1, got 0"]
