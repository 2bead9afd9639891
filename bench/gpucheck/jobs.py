"""The phases that start processes: the CUDA test file (pytest), distributed training runs,
resume across devices, and a stalled peer that must end its job within the timeout."""
from __future__ import annotations

import importlib.util
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .plan import ROOT, TINY, Plan, child_env, run, train

NO_PYTEST = ("pytest not installed: carry pytest and its wheels (iniconfig, pluggy, packaging) as docs/gpu.md "
             "says, or rerun with --skip-tests")


def cuda_tests(plan: Plan, work: Path) -> dict[str, Any]:
    """``tests/distributed/test_cuda.py`` under pytest, in a child process."""
    if importlib.util.find_spec("pytest") is None:
        return {"ok": False, "summary": NO_PYTEST, "failures": [], "seconds": 0.0}
    code, output, seconds = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                 str(ROOT / "tests" / "distributed" / "test_cuda.py")], ROOT, 480)
    lines = [line for line in output.splitlines() if line.strip()]
    summary = next((line for line in reversed(lines) if re.search(r"\b(passed|failed|skipped|errors?)\b", line)),
                   lines[-1] if lines else f"exit code {code} and no output")
    failures = [line for line in lines if line.startswith(("FAILED", "ERROR"))]
    return {"ok": code == 0, "summary": summary.strip("= "), "failures": failures, "seconds": round(seconds, 1),
            **({} if code == 0 else {"tail": output[-4000:]})}


def workers_line(ranks: int, plan: Plan) -> str:
    """The start of the line a job's rank 0 prints: its workers, device and backend."""
    return f"Workers: {ranks} on {plan.device} ({plan.backend}),"


def distributed_runs(plan: Plan, work: Path) -> dict[str, Any]:
    """A 1-rank job through ``--distributed`` (NCCL; gloo in the rehearsal), and a 2-rank one
    where two ranks fit."""
    out: dict[str, Any] = {}
    for ranks in (1, 2):
        if plan.ranks < ranks:
            out[f"{ranks}_rank"] = f"skipped: needs {ranks} GPUs"
            continue
        code, output, seconds = train(work / f"ranks{ranks}", *TINY, "--device", plan.device, "--distributed",
                                      plan.workers_flag, str(ranks), "--episodes", "8", "--sync-check-interval", "1")
        ok = code == 0 and workers_line(ranks, plan) in output and "diverged" not in output
        out[f"{ranks}_rank"] = {"ok": ok, "backend": plan.backend, "seconds": round(seconds, 1),
                                **({} if ok else {"tail": output[-800:]})}
    return out


def resume_across_devices(plan: Plan, work: Path) -> dict[str, Any]:
    """A run on the GPU, resumed on the CPU, then on the GPU again: one warning line each,
    naming both devices (in the rehearsal the CPU is both, and no warning is expected)."""
    cwd = work / "resume"
    code, output, _ = train(cwd, *TINY, "--device", plan.device, "--episodes", "4")
    out: dict[str, Any] = {"first_run_ok": code == 0}
    for key, device, episodes, written_on in (("gpu_to_cpu", "cpu", "8", plan.device),
                                              ("cpu_to_gpu", plan.device, "12", "cpu")):
        code, output, seconds = train(cwd, *TINY, "--device", device, "--resume", "--episodes", episodes)
        lines = [line for line in output.splitlines() if "warning" in line]
        if written_on != device:
            warned = len(lines) == 1 and f"written on {written_on} and this run is on {device}" in lines[0]
        else:
            warned = not lines
        ok = code == 0 and warned and f"Training finished: {episodes} episodes" in output
        out[key] = {"ok": ok, "warning": lines, **({} if ok else {"tail": output[-800:]})}
    return out


def stalled_peer(plan: Plan, work: Path) -> dict[str, Any]:
    """SIGSTOP rank 1 of a 2-rank job: the job must end within ``--dist-timeout`` plus the
    margin, without a traceback. A job still alive after ``plan.stall_wait`` is killed,
    launcher and workers."""
    if plan.ranks < 2:
        return {"skipped": "needs 2 GPUs"}
    cwd = work / "stall"
    cwd.mkdir(parents=True, exist_ok=True)
    args = [sys.executable, str(ROOT / "train_ppo_lstm.py"), *TINY, "--device", plan.device, "--distributed",
            plan.workers_flag, "2", "--episodes", "100000", "--dist-timeout", str(plan.dist_timeout)]
    process = subprocess.Popen(args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env=child_env(), start_new_session=True)
    deadline = time.monotonic() + 120
    while not (cwd / "training.log").exists() and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.2)
    time.sleep(plan.settle)  # well into training
    workers = worker_pids(process.pid)
    if len(workers) < 2:
        end_job(process, workers, cwd)
        return {"ok": False, "error": f"expected 2 workers, found {workers}", "tail": process.communicate()[0][-800:]}
    victim = workers[-1]
    os.kill(victim, signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        output, _ = process.communicate(timeout=plan.stall_wait)
        code = process.returncode
    except subprocess.TimeoutExpired:
        end_job(process, workers, cwd)
        output, code = process.communicate()[0], None
    seconds = time.monotonic() - stopped
    end_job(process, workers, cwd)  # the stopped rank, if the launcher left it behind
    errors = [line for line in output.splitlines() if line.startswith(("error", "rank"))]
    ok = code not in (None, 0) and seconds <= plan.dist_timeout + plan.stall_margin and "Traceback" not in output
    return {"ok": ok, "exit_code": code if code is not None else f"still running after {plan.stall_wait:g} s: killed",
            "seconds_to_exit": round(seconds, 1), "dist_timeout": plan.dist_timeout, "lines": errors[:4]}


def end_job(process: subprocess.Popen, workers: list[int], cwd: Path) -> None:
    """Kill a job: its launcher's process group and every worker by pid (spawned workers
    have process groups of their own, which the launcher's misses). A pid is killed only
    while its process still runs in ``cwd``: an exited worker's pid may be reused."""
    for pid in workers:
        try:
            if os.path.realpath(os.readlink(f"/proc/{pid}/cwd")) != os.path.realpath(cwd):
                continue
        except OSError:
            continue
        for signum in (signal.SIGCONT, signal.SIGKILL):  # a stopped process dies once continued
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def worker_pids(pid: int) -> list[int]:
    """The training workers a launcher started (its children, less multiprocessing's resource tracker)."""
    found: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as handle:
                found += [int(p) for p in handle.read().split()]
    except OSError:
        return []
    workers = []
    for child in found:
        try:
            with open(f"/proc/{child}/cmdline", "rb") as handle:
                cmd = handle.read().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "resource_tracker" not in cmd:
            workers.append(child)
    return sorted(workers)
