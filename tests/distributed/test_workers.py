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

from conftest import SPAWN2, TINY, TRAIN, cli_in_process, episode_lines, run_cli
from ppo_lstm.config.checks import validate
from ppo_lstm.config.schema import TrainConfig
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
    from ppo_lstm.distributed import threads_per_worker

    environ = {} if omp is None else {"OMP_NUM_THREADS": omp}
    assert threads_per_worker(TrainConfig(threads=flag), environ) == expected


def test_threads_must_be_positive():
    with pytest.raises(UsageError, match="--threads must be at least 1, got 0"):
        validate(TrainConfig(threads=0))


@pytest.mark.e2e
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


@pytest.fixture(scope="module")
def spawned_default(tmp_path_factory):
    """One run of 2 spawned CPU workers left to their default threads (no --threads, no
    OMP_NUM_THREADS), shared by the two tests below."""
    cwd = tmp_path_factory.mktemp("spawned_default")
    return run_cli(cwd, *TINY, *SPAWN2, "--episodes", "4", env={"OMP_NUM_THREADS": None})


@pytest.mark.e2e
def test_spawned_cpu_workers_use_one_thread_each(spawned_default):
    result = spawned_default
    assert result.returncode == 0, result.output
    assert startup_line(result.stdout) == "Workers: 2 on cpu (gloo), 1 torch thread each"


def test_zero_threads_is_one_line_exit_2(cwd):
    result = cli_in_process(cwd, *TINY, "--episodes", "2", "--threads", "0")
    assert result.returncode == 2
    assert result.error_lines() == ["error: --threads must be at least 1, got 0"]


# ----------------------------------------------------------------------------- devices and worker counts


def more_gpus_than_visible() -> tuple[int, int]:
    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return visible, visible + 3


@pytest.mark.parametrize("args", [
    ["--distributed", "--num-gpus"],
    ["--distributed", "--num-workers"],  # the same flag: under auto/cuda it counts GPUs
    ["--num-gpus"],  # without --distributed too: the count is still impossible
], ids=["num-gpus", "num-workers", "not-distributed"])
def test_more_gpus_than_visible_is_a_startup_error(cwd, args):
    """--num-gpus 4 on a machine without a GPU used to run 4 CPU workers after a warning."""
    visible, wanted = more_gpus_than_visible()
    result = cli_in_process(cwd, *TINY_ANY_DEVICE, "--episodes", "2", *args, str(wanted))
    assert result.returncode == 2, result.output
    assert len(result.error_lines()) == 1, result.stderr
    line = result.error_lines()[0]
    assert f"--num-gpus {wanted} asks for more GPUs than the {visible} visible" in line
    assert f"--device cpu --num-workers {wanted}" in line
    assert "Traceback" not in result.output and "Workers:" not in result.stdout
    assert not (cwd / "training.log").exists()


def test_explicit_cuda_without_gpu_names_the_cpu_alternative(cwd):
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is visible here")
    result = cli_in_process(cwd, *TINY_ANY_DEVICE, "--episodes", "2", "--device", "cuda", "--distributed",
                            "--num-gpus", "4")
    assert result.returncode == 2
    assert result.error_lines() == ["error: --device cuda was asked for but no CUDA device is visible; use "
                                    "--device cpu (with --num-workers N for N CPU workers)"]


def test_nccl_backend_on_cpu_is_a_startup_error(cwd):
    result = cli_in_process(cwd, *TINY, *SPAWN2, "--episodes", "2", "--backend", "nccl")
    assert result.returncode == 2
    assert result.error_lines() == ["error: --backend nccl needs CUDA devices; CPU workers use gloo "
                                    "(leave --backend out)"]


def pinned_to_one_core() -> list[str]:
    """A launcher running the CLI with its CPU affinity (inherited by its workers) set to one core."""
    code = (f"import os, runpy, sys; os.sched_setaffinity(0, {{sorted(os.sched_getaffinity(0))[0]}}); "
            f"sys.argv = [{TRAIN!r}] + sys.argv[1:]; runpy.run_path({TRAIN!r}, run_name='__main__')")
    return [sys.executable, "-c", code]


@pytest.mark.e2e
@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs CPU affinity (Linux)")
def test_more_cpu_workers_than_cores_warns_once(cwd):
    """2 CPU workers on 1 core: one warning line from the launcher; CPU episode lines say Workers."""
    result = run_cli(cwd, *TINY, *SPAWN2, "--episodes", "4", "--log-interval", "2", launcher=pinned_to_one_core(),
                     env={"OMP_NUM_THREADS": None})
    assert result.returncode == 0, result.output
    assert result.error_lines() == ["warning: 2 CPU workers on 1 core: they slow each other down; "
                                    "use --num-workers 1 or fewer"]
    assert startup_line(result.stdout) == "Workers: 2 on cpu (gloo), 1 torch thread each"
    lines = episode_lines(cwd / "training.log")
    assert lines and all(line.endswith(" | Workers: 2") for line in lines)


@pytest.mark.e2e
def test_cpu_workers_within_the_cores_do_not_warn(spawned_default):
    """2 workers x 1 thread (their default) on 2 or more cores: no warning."""
    from ppo_lstm.distributed import usable_cores

    if usable_cores() < 2:
        pytest.skip("needs 2 cores")
    result = spawned_default
    assert result.returncode == 0, result.output
    assert "warning" not in result.stderr


def test_episode_line_says_workers_on_cpu_and_gpus_on_cuda():
    from ppo_lstm.algo.episodes import EpisodeTotals
    from ppo_lstm.rundir.logger import format_episode_line

    totals = EpisodeTotals(episodes=2, reward=3.0, dollar_return=-4.0, closed=2, wins=1, open_lots=1, steps=32)
    base = "Episode 10/20 - Reward: 1.50, Return: -$2.00, Win Rate: 50.0% (2 closed, 1 open), Steps: 16"
    assert format_episode_line(10, 20, totals, 4, "cpu") == base + " | Workers: 4"
    assert format_episode_line(10, 20, totals, 4, "cuda") == base + " | GPUs: 4"
    assert format_episode_line(10, 20, totals, 4) == base + " | GPUs: 4"  # the seed format's default
    assert format_episode_line(10, 20, totals, 1, "cpu") == base
