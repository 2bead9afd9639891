"""The GPU acceptance command (``bench/gpu_check.py``), checked on the CPU:

1. the rehearsal (``--rehearse-on-cpu``) runs every phase with the CPU standing in for CUDA and
   gloo for NCCL: the real start-up lines, every report section filled, the JSON line, exit 0;
2. the 1-rank job's check matches the start-up line a 1-rank process group prints;
3. without pytest the tests phase says so, instead of a blank failure;
4. child processes keep the user's ``PYTHONPATH`` after the repository;
5. a phase that raises is recorded as a failed check and the next phase runs; the report
   renders whatever each phase gave;
6. the report keeps the NCCL version beside the distributed runs;
7. a job the stalled-peer check gives up on is killed, each worker by its pid.
"""
from __future__ import annotations

import json
from dataclasses import replace
import signal
import subprocess
import sys

import pytest

from conftest import ROOT, SPAWN2, TINY, assert_no_process_left, env_for_child
from ppo_lstm.distributed import describe_workers

sys.path[:0] = [str(ROOT), str(ROOT / "bench")]
import gpu_check  # noqa: E402
from bench.gpucheck import jobs  # noqa: E402
from bench.gpucheck.plan import REHEARSAL, Plan, nccl_version, run  # noqa: E402
from bench.gpucheck.report import render  # noqa: E402

GPU = {"gpu": "Test GPU", "gpus": 1, "driver": "550.1", "torch": "2.13.0", "cuda": "12.8", "cudnn": 91000,
       "nccl": "2.21.5", "bf16_hardware": True}  # a machine description, for reports made without a GPU
SECTIONS = ["tests", "throughput", "numerics", "variants", "bf16_dtypes", "syncs", "distributed_runs", "resume",
            "stalled_peer"]


@pytest.mark.e2e
@pytest.mark.timeout(600)
def test_cpu_rehearsal_passes_with_every_section_filled(tmp_path):
    out = tmp_path / "rehearsal.md"
    result = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_check.py"), "--rehearse-on-cpu", "--out",
                             str(out)], capture_output=True, text=True, timeout=540, cwd=tmp_path, env=env_for_child())
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    text = out.read_text()
    report = json.loads(text.splitlines()[-1])
    assert report["rehearsal"] is True and report["failed"] == []  # no check failed, no phase raised
    assert all(report[section] for section in SECTIONS) and report["stand_ins"]
    assert all(report["throughput"][side][str(n)]["env_steps_per_s"] > 0 for side in ("gpu", "cpu")
               for n in REHEARSAL.sizes)
    assert all(v["env_steps_per_s"] > 0 for v in report["variants"].values())
    assert report["bf16_dtypes"]["project_lstm"] == "torch.bfloat16" and report["numerics"]
    assert report["syncs"]["ran"]
    assert "skipped" in report["tests"]["summary"]  # test_cuda.py ran under pytest, and skipped without CUDA
    assert report["distributed_runs"]["1_rank"]["ok"] and report["distributed_runs"]["2_rank"]["ok"]
    assert report["resume"]["first_run_ok"] and report["resume"]["gpu_to_cpu"]["ok"]
    assert report["stalled_peer"]["ok"] and report["stalled_peer"]["lines"]
    assert report["nccl"] == nccl_version() and text.splitlines()[0].endswith(f"NCCL {report['nccl']}")
    assert "All checks passed: True" in result.stdout


def test_one_rank_check_matches_the_one_rank_start_up_line():
    for plan in (Plan(), REHEARSAL):
        for ranks in (1, 2):
            assert describe_workers(ranks, plan.device, plan.backend, 1).startswith(jobs.workers_line(ranks, plan))


def test_without_pytest_the_tests_phase_says_so(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "pytest", None)  # import pytest now fails, as on a bare GPU image
    result = jobs.cuda_tests(REHEARSAL, tmp_path)
    monkeypatch.undo()
    assert result["ok"] is False and result["summary"].startswith("pytest not installed")
    report = gpu_check.measure(REHEARSAL, [("tests", lambda: result)])
    assert report["failed"] == ["tests"]


@pytest.mark.e2e
def test_children_keep_the_users_pythonpath(monkeypatch, tmp_path):
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))  # a `pip install --target` directory
    code, output, _ = run([sys.executable, "-c", "import sys; print(repr(sys.path))"], tmp_path, 60)
    assert code == 0, output
    path = eval(output.strip())  # noqa: S307 - the repr of a list of strings we printed
    assert path.index(str(ROOT)) < path.index(str(tmp_path / "site"))


def test_a_failing_phase_is_recorded_and_the_next_one_runs():
    def out_of_memory():
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")

    ran = []
    report = gpu_check.measure(REHEARSAL, [("throughput", out_of_memory),
                                           ("syncs", lambda: ran.append(1) or {"per_rollout_step": 0.5})])
    assert report["throughput"] == {"ok": False,
                                    "error": "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"}
    assert ran and report["syncs"] == {"per_rollout_step": 0.5}
    assert report["failed"] == ["throughput"]


@pytest.mark.parametrize("plan", [Plan(), REHEARSAL], ids=["cuda", "rehearsal"])
def test_the_report_renders_every_section_even_when_each_phase_failed(plan):
    """Each phase gave an error: the tables, the JSON line, the NCCL version and the verdict still come out."""
    def failed():
        raise ValueError("no luck")

    report = gpu_check.measure(plan, [(name, failed) for name in SECTIONS], None if plan.rehearsal else GPU)
    text = render(report, plan)
    assert report["failed"] == SECTIONS
    assert text.count("ValueError: no luck") >= len(SECTIONS)
    header, json_line = text.splitlines()[0], text.splitlines()[-1]
    assert header.endswith(f"NCCL {report['nccl']}") and json.loads(json_line)["nccl"] == report["nccl"]
    assert "All checks passed: False" in text


def test_the_nccl_version_and_the_runs_are_both_kept():
    runs = {"1_rank": {"ok": True, "backend": "nccl", "seconds": 3.0}, "2_rank": "skipped: needs 2 GPUs"}
    report = gpu_check.measure(Plan(), [("distributed_runs", lambda: runs)], GPU)
    assert report["nccl"] == "2.21.5" and report["distributed_runs"] == runs
    assert gpu_check.measure(REHEARSAL, [])["nccl"] == nccl_version()  # this machine's, whatever its torch


# Run in a child that is a subreaper (prctl PR_SET_CHILD_SUBREAPER): a job's workers become its
# children when their launcher dies, so it learns how each one ended.
END_JOB = """
import ctypes, json, os, subprocess, sys, time
from pathlib import Path
from bench.gpucheck import jobs

assert ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
cwd = Path(sys.argv[1])
cwd.mkdir()
job = subprocess.Popen(sys.argv[2:], cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       start_new_session=True)
metrics = cwd / "checkpoints" / "metrics.csv"
deadline = time.monotonic() + 120
while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 2) and time.monotonic() < deadline:
    time.sleep(0.05)
workers = jobs.worker_pids(job.pid)
jobs.end_job(job, workers, cwd)
ended = {}
while True:
    try:
        pid, status = os.waitpid(-1, 0)
    except ChildProcessError:
        break
    ended[pid] = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"exit {os.WEXITSTATUS(status)}"
print(json.dumps([ended.get(pid, "not seen") for pid in workers]))
"""


@pytest.mark.e2e
def test_ending_a_job_kills_its_workers_by_pid(tmp_path):
    """What the stalled-peer check does when it gives up on a job. Spawned workers have process
    groups of their own: killing the launcher's group alone leaves them to end themselves on the
    SIGINT its death sends (a CPU rank does, with exit code 130 or 1; a rank stuck in an NCCL
    collective may not, and keeps its GPU). The check kills each worker by its pid."""
    (tmp_path / "end_job.py").write_text(END_JOB)
    train = [sys.executable, str(ROOT / "train_ppo_lstm.py"), *TINY, *SPAWN2, "--episodes", "100000",
             "--checkpoint-interval", "1000000"]
    result = subprocess.run([sys.executable, str(tmp_path / "end_job.py"), str(tmp_path / "run"), *train],
                            capture_output=True, text=True, timeout=180, env=env_for_child())
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.splitlines()[-1]) == [f"signal {signal.SIGKILL.value}"] * 2
    assert_no_process_left(tmp_path / "run")


def test_the_report_so_far_is_written_after_every_phase(tmp_path):
    partial = tmp_path / "check.md.partial.json"
    seen = []

    def second():
        seen.append(json.loads(partial.read_text()))  # written once the first phase ended
        raise RuntimeError("the machine was taken back")

    report = gpu_check.measure(REHEARSAL, [("first", lambda: {"ok": True, "value": 1}), ("second", second)],
                               machine=GPU, partial=partial)
    assert seen[0]["first"] == {"ok": True, "value": 1} and "second" not in seen[0]
    final = json.loads(partial.read_text())
    assert final["second"]["error"].startswith("RuntimeError") and report["failed"] == ["second"]


@pytest.mark.parametrize("skip_tests", [False, True])
def test_the_report_names_the_command_that_ran(skip_tests):
    plan = replace(Plan(), skip_tests=skip_tests)
    def failed():
        raise ValueError("not run")

    report = gpu_check.measure(plan, [(name, failed) for name in SECTIONS], GPU)
    expected = "python bench/gpu_check.py --skip-tests" if skip_tests else "python bench/gpu_check.py"
    assert f"Command: `{expected}`" in render(report, plan).splitlines()
