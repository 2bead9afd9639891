"""GPU acceptance: one command that checks a CUDA machine end to end, in under 10 minutes.

    python bench/gpu_check.py [--out bench/results/gpu_check_<gpu>.md] [--skip-tests]

It runs, and reports in one markdown table plus one JSON line (also written to ``--out``):

1. ``tests/distributed/test_cuda.py`` (pytest): NCCL collectives, fused Adam state, per-step syncs,
   the IEEE replay of log-probs, the device-side finite check, bf16 dtypes, CPU-only
   checkpoints, resume across devices, a 1-GPU run (and a 2-GPU NCCL run with 2 GPUs);
2. env-steps/s of the training loop (rollout + update, no hold-out or checkpoints) on one
   GPU and on one CPU core, at ``--num-envs`` 8, 64, 512 and 4096 (16 steps per env and
   update, 4 epochs x 4 minibatches, the default model);
3. ``--autocast bf16`` against float32, and ``--deterministic`` against ``--no-deterministic``,
   at 512 envs on the GPU: speed, and the dtypes the update's LSTM runs in;
4. synchronizing CUDA calls per rollout step and per update (``torch.cuda.set_sync_debug_mode``);
5. a 1-rank NCCL run through ``--distributed`` (and a 2-rank one where 2 GPUs are visible);
6. resume GPU -> CPU and CPU -> GPU: each must finish with one warning line;
7. a stalled peer under NCCL (SIGSTOP on rank 1, 2 GPUs): the job must end within
   ``--dist-timeout`` plus a margin, with one clear line.

Without CUDA it exits 2 with one line. The machine needs the project's dependencies;
GPU machines without internet need gymnasium and farama-notifications carried as
wheels (docs: README, "GPU acceptance").
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Optional  # noqa: E402

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TINY = ["--num-envs", "2", "--update-interval", "32", "--episode-length", "16", "--window", "8",
        "--hidden-size", "16", "--lstm-size", "16", "--minibatches", "2", "--market", "regime", "--seed", "3",
        "--no-progress"]
SIZES = (8, 64, 512, 4096)
STEPS_PER_ENV = 16
STALL_TIMEOUT = 20.0  # --dist-timeout of the stalled-peer run, seconds
STALL_MARGIN = 30.0


def environment() -> dict[str, Any]:
    """The GPU, driver, torch, CUDA, cuDNN and NCCL this check ran on."""
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=30).stdout.split("\n")[0].strip()
    except (OSError, subprocess.TimeoutExpired):
        driver = "unknown (no nvidia-smi)"
    nccl = torch.cuda.nccl.version() if hasattr(torch.cuda, "nccl") else None
    return {"gpu": torch.cuda.get_device_name(0), "gpus": torch.cuda.device_count(), "driver": driver,
            "torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
            "nccl": ".".join(map(str, nccl)) if isinstance(nccl, tuple) else nccl,
            "bf16_hardware": torch.cuda.is_bf16_supported(including_emulation=False)}


def run(args: list[str], cwd: Path, timeout: float, env: Optional[dict[str, str]] = None) -> tuple[int, str, float]:
    """Run a command; (exit code, stdout+stderr, seconds)."""
    started = time.monotonic()
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1", **(env or {})}
    try:
        out = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=full_env)
        return out.returncode, out.stdout + out.stderr, time.monotonic() - started
    except subprocess.TimeoutExpired as err:
        text = (err.stdout or b"").decode(errors="replace") if isinstance(err.stdout, bytes) else (err.stdout or "")
        return 124, text, time.monotonic() - started


def train(cwd: Path, *args: str, timeout: float = 240.0) -> tuple[int, str, float]:
    return run([sys.executable, str(ROOT / "train_ppo_lstm.py"), *args], cwd, timeout)


# ------------------------------------------------------------------ 1. tests


def cuda_tests() -> dict[str, Any]:
    code, output, seconds = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                 str(ROOT / "tests" / "distributed" / "test_cuda.py")], ROOT, 480)
    summary = next((line for line in reversed(output.splitlines()) if re.search(r"passed|failed|error", line)), "")
    failures = [line for line in output.splitlines() if line.startswith(("FAILED", "ERROR"))]
    return {"ok": code == 0, "summary": summary.strip("= "), "failures": failures, "seconds": round(seconds, 1)}


# ------------------------------------------------------------------ 2-4. throughput, dtypes, syncs


def make_trainer(device: str, num_envs: int, tmp: str, autocast: str = "off", deterministic: bool = True):
    from ppo_lstm.config import TrainConfig
    from ppo_lstm.distributed import LocalComm, Worker
    from ppo_lstm.distributed.cuda import configure_numerics
    from ppo_lstm.train.shutdown import StopRequest
    from ppo_lstm.train.trainer import Trainer

    if device == "cuda":
        configure_numerics(deterministic)
    config = TrainConfig(episodes=10**9, num_envs=num_envs, update_interval=num_envs * STEPS_PER_ENV,
                         autocast=autocast, deterministic=deterministic, progress=False, holdout=0.0,
                         holdout_episodes=0, log_file=os.path.join(tmp, "log"), checkpoint_dir=tmp)
    return Trainer(config, Worker(LocalComm(), 0, torch.device(device)), None, StopRequest())


def iteration(trainer) -> tuple[float, float]:
    """One training iteration without logging: (rollout seconds, update seconds)."""
    from ppo_lstm.train.agreement import exchange

    sync = torch.cuda.synchronize if trainer.device.type == "cuda" else (lambda: None)
    tic = time.perf_counter()
    records = trainer.rollout.collect(trainer.state.update)
    local = trainer.rollout.finish()
    batch, _ = exchange(trainer.comm, local, records, False, 0, 1.0, trainer.steps * trainer.config.num_envs)
    sync()
    mid = time.perf_counter()
    trainer._update(batch)
    sync()
    return mid - tic, time.perf_counter() - mid


def throughput(device: str, num_envs: int, budget_s: float, **kwargs: Any) -> dict[str, Any]:
    """env-steps/s of rollout + update at ``num_envs``, after one warm-up iteration, over
    at least 3 iterations or ``budget_s`` seconds."""
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        trainer = make_trainer(device, num_envs, tmp, **kwargs)
        try:
            iteration(trainer)  # warm-up: allocations, cuBLAS/cuDNN handles
            rollout = update = 0.0
            done = 0
            while done < 3 or rollout + update < budget_s:
                r, u = iteration(trainer)
                rollout, update, done = rollout + r, update + u, done + 1
                if done >= 50:
                    break
        finally:
            trainer.log.close()
    steps = done * num_envs * STEPS_PER_ENV
    return {"env_steps_per_s": round(steps / (rollout + update), 1), "iterations": done,
            "rollout_share": round(rollout / (rollout + update), 3)}


def lstm_dtypes() -> dict[str, str]:
    """The dtype the update's LSTM runs in under --autocast bf16 (the project's explicit path),
    and what nn.LSTM left to CUDA autocast would give (cuDNN's own rule)."""
    from ppo_lstm.train.build import build_agent
    from ppo_lstm.config import TrainConfig

    agent = build_agent(TrainConfig()).cuda()
    obs = torch.randn(4, 3, agent.encoder[0].in_features, device="cuda")
    seen = []
    original = torch.lstm

    def spy(*args: Any) -> Any:
        seen.append(str(args[0].dtype))
        return original(*args)

    with torch.autocast("cuda", dtype=torch.bfloat16):
        torch.lstm = spy
        try:
            logits, _, _ = agent(obs, agent.initial_state(3, "cuda"), torch.zeros(4, 3, device="cuda"))
        finally:
            torch.lstm = original
        plain, _ = agent.lstm(agent.encoder(obs))
    return {"project_lstm": ",".join(sorted(set(seen))), "plain_nn_lstm_under_autocast": str(plain.dtype),
            "logits": str(logits.dtype), "weights": str(next(agent.parameters()).dtype)}


def syncs() -> dict[str, Any]:
    """Synchronizing CUDA calls per rollout step and per update, at 64 envs."""
    from ppo_lstm.distributed.cuda import count_syncs
    from ppo_lstm.train.agreement import exchange

    with tempfile.TemporaryDirectory() as tmp:
        trainer = make_trainer("cuda", 64, tmp)
        try:
            iteration(trainer)
            rollout = count_syncs(lambda: trainer.rollout.collect(trainer.state.update))
            local = trainer.rollout.finish()
            batch, _ = exchange(trainer.comm, local, torch.zeros(0, 6).numpy(), False, 0, 1.0,
                                trainer.steps * trainer.config.num_envs)
            update = count_syncs(lambda: trainer._update(batch))
        finally:
            trainer.log.close()
    return {"per_rollout_step": round(rollout / trainer.steps, 2), "per_update": update}


# ------------------------------------------------------------------ 5-7. NCCL, resume, stalled peer


def nccl_runs(work: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for gpus in (1, 2):
        if torch.cuda.device_count() < gpus:
            out[f"{gpus}_rank"] = "skipped: needs 2 GPUs"
            continue
        cwd = work / f"nccl{gpus}"
        cwd.mkdir()
        code, output, seconds = train(cwd, *TINY, "--device", "cuda", "--distributed", "--num-gpus", str(gpus),
                                      "--episodes", "8", "--sync-check-interval", "1")
        ok = code == 0 and f"Workers: {gpus} on cuda (nccl)" in output and "diverged" not in output
        out[f"{gpus}_rank"] = {"ok": ok, "seconds": round(seconds, 1), **({} if ok else {"tail": output[-800:]})}
    return out


def resume_across_devices(work: Path) -> dict[str, Any]:
    cwd = work / "resume"
    cwd.mkdir()
    code, output, _ = train(cwd, *TINY, "--device", "cuda", "--episodes", "4")
    out: dict[str, Any] = {"first_run_ok": code == 0}
    for device, episodes, written_on in (("cpu", "8", "cuda"), ("cuda", "12", "cpu")):
        code, output, seconds = train(cwd, *TINY, "--device", device, "--resume", "--episodes", episodes)
        lines = [line for line in output.splitlines() if "warning" in line]
        ok = (code == 0 and len(lines) == 1 and f"written on {written_on} and this run is on {device}" in lines[0]
              and f"Training finished: {episodes} episodes" in output)
        out[f"{written_on}_to_{device}"] = {"ok": ok, "warning": lines, **({} if ok else {"tail": output[-800:]})}
    return out


def stalled_peer(work: Path) -> dict[str, Any]:
    if torch.cuda.device_count() < 2:
        return {"skipped": "needs 2 GPUs"}
    cwd = work / "stall"
    cwd.mkdir()
    args = [sys.executable, str(ROOT / "train_ppo_lstm.py"), *TINY, "--device", "cuda", "--distributed",
            "--num-gpus", "2", "--episodes", "100000", "--dist-timeout", str(STALL_TIMEOUT)]
    process = subprocess.Popen(args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"},
                               start_new_session=True)
    deadline = time.monotonic() + 120
    while not (cwd / "training.log").exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    time.sleep(3.0)  # well into training
    children = _children(process.pid)
    if len(children) < 2:
        process.kill()
        return {"ok": False, "error": f"expected 2 workers, found {children}"}
    victim = children[-1]
    os.kill(victim, signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        output, _ = process.communicate(timeout=STALL_TIMEOUT + STALL_MARGIN + 30)
        code = process.returncode
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, code = process.communicate()[0], None
    finally:
        try:
            os.kill(victim, signal.SIGCONT)
            os.kill(victim, signal.SIGKILL)
        except ProcessLookupError:
            pass
    seconds = time.monotonic() - stopped
    errors = [line for line in output.splitlines() if line.startswith(("error", "rank"))]
    ok = code not in (None, 0) and seconds <= STALL_TIMEOUT + STALL_MARGIN and "Traceback" not in output
    return {"ok": ok, "exit_code": code, "seconds_to_exit": round(seconds, 1), "dist_timeout": STALL_TIMEOUT,
            "lines": errors[:4]}


def _children(pid: int) -> list[int]:
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as handle:
            found += [int(p) for p in handle.read().split()]
    workers = []
    for child in found:  # the resource tracker is a child too: workers are the ones running our code
        try:
            cmd = open(f"/proc/{child}/cmdline", "rb").read().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "resource_tracker" not in cmd:
            workers.append(child)
    return sorted(workers)


# ------------------------------------------------------------------ report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="markdown file to write (default: bench/results/gpu_check_<gpu>.md)")
    parser.add_argument("--skip-tests", action="store_true", help="leave tests/distributed/test_cuda.py out")
    parser.add_argument("--budget", type=float, default=6.0, help="seconds of timing per throughput point")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("error: no CUDA device is visible; run bench/gpu_check.py on a machine with an NVIDIA GPU",
              file=sys.stderr)
        return 2
    started = time.monotonic()
    report: dict[str, Any] = {"bench": "gpu_check", **environment()}
    from ppo_lstm.distributed.cuda import numerics_settings

    report["tests"] = {"skipped": True} if args.skip_tests else cuda_tests()
    report["throughput"] = {device: {str(n): throughput(device, n, args.budget) for n in SIZES}
                            for device in ("cuda", "cpu")}
    report["numerics"] = numerics_settings()
    report["variants_512"] = {
        "float32": throughput("cuda", 512, args.budget),
        "bf16": throughput("cuda", 512, args.budget, autocast="bf16") if report["bf16_hardware"] else "no bf16",
        "no_deterministic": throughput("cuda", 512, args.budget, deterministic=False),
    }
    report["bf16_dtypes"] = lstm_dtypes() if report["bf16_hardware"] else "no bf16"
    report["syncs"] = syncs()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        report["nccl"] = nccl_runs(work)
        report["resume"] = resume_across_devices(work)
        report["stalled_peer"] = stalled_peer(work)
    report["seconds"] = round(time.monotonic() - started, 1)
    text = render(report)
    print(text)
    slug = re.sub(r"[^a-z0-9]+", "_", report["gpu"].lower()).strip("_")
    out = Path(args.out) if args.out else ROOT / "bench" / "results" / f"gpu_check_{slug}.md"
    out.write_text(text + "\n")
    print(f"written to {out}")
    return 0 if all_ok(report) else 1


def all_ok(report: dict[str, Any]) -> bool:
    checks = [report["tests"].get("ok", True), report["resume"]["first_run_ok"],
              *(v["ok"] for k, v in report["resume"].items() if isinstance(v, dict)),
              *(v["ok"] for v in report["nccl"].values() if isinstance(v, dict)),
              report["stalled_peer"].get("ok", True), report["syncs"]["per_rollout_step"] <= 1.0]
    return all(checks)


def render(report: dict[str, Any]) -> str:
    """The markdown table and the JSON line."""
    lines = [f"# GPU check: {report['gpu']} x{report['gpus']}, driver {report['driver']}, torch {report['torch']}, "
             f"CUDA {report['cuda']}, cuDNN {report['cudnn']}, NCCL {report['nccl']}",
             "", "Command: `python bench/gpu_check.py`", "",
             "| num-envs | GPU env-steps/s | CPU env-steps/s (1 core) | GPU / CPU | GPU rollout share |",
             "|---:|---:|---:|---:|---:|"]
    for n in SIZES:
        g, c = report["throughput"]["cuda"][str(n)], report["throughput"]["cpu"][str(n)]
        lines.append(f"| {n} | {g['env_steps_per_s']:,.0f} | {c['env_steps_per_s']:,.0f} | "
                     f"{g['env_steps_per_s'] / c['env_steps_per_s']:.2f}x | {g['rollout_share']:.0%} |")
    v = report["variants_512"]
    lines += ["", "| at 512 envs on the GPU | env-steps/s |", "|---|---:|"]
    for name, value in v.items():
        lines.append(f"| {name} | {value['env_steps_per_s']:,.0f} |" if isinstance(value, dict) else
                     f"| {name} | {value} |")
    lines += ["", "| check | result |", "|---|---|",
              f"| tests/distributed/test_cuda.py | {report['tests'].get('summary', 'skipped')} "
              f"{'; '.join(report['tests'].get('failures', []))} |",
              f"| syncs per rollout step / per update | {report['syncs']['per_rollout_step']} / "
              f"{report['syncs']['per_update']} |",
              f"| update LSTM dtype under --autocast bf16 | {report['bf16_dtypes']} |",
              f"| numerics | {report['numerics']} |"]
    for name, value in report["nccl"].items():
        lines.append(f"| NCCL run, {name.replace('_', ' ')} | {value} |")
    for name, value in report["resume"].items():
        lines.append(f"| resume {name.replace('_', ' ')} | {value} |")
    lines.append(f"| stalled peer (SIGSTOP rank 1) | {report['stalled_peer']} |")
    lines += ["", f"All checks passed: {all_ok(report)} ({report['seconds']} s)", "", json.dumps(report)]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
