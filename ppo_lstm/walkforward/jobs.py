"""The (fold, seed) jobs: each an ordinary training run in its own run dir, run as a
subprocess of ``python -m train_ppo_lstm --config train.yaml`` with the run dir as its cwd.

A job's run dir ``<out>/jobs/fold<K>-seed<S>/`` holds ``train.yaml`` (its settings, written
here with the training command's own config writer), ``training.log``, ``checkpoints/``
and, once its test window is traded, ``test.json``, the marker of a finished job. Its
state is read from the dir alone: ``test.json`` -> done (left untouched); a checkpoint to
resume from -> ``--resume``; else a fresh start (``--overwrite`` moves the files of a run
cut off before its first checkpoint aside).

:func:`run_jobs` runs them ``jobs`` at a time (a thread per slot waiting on its process);
SIGINT or SIGTERM is passed on once to every running training, which checkpoints and
stops, and :func:`run_jobs` returns the signal's exit code.
"""
from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from tqdm import tqdm

from ..config.command_line import config_yaml
from ..config.schema import TrainConfig
from ..distributed.devices import threads_per_worker
from ..rundir.checkpoint import CheckpointDir, atomic_write_bytes
from .folds import Fold

DONE_NAME = "test.json"
TRAIN_CONFIG_NAME = "train.yaml"
ROOT = Path(__file__).resolve().parents[2]  # the directory holding ppo_lstm/ and envs/


@dataclass(frozen=True)
class Job:
    """One training of fold ``fold.k`` with ``seed``, in ``path``; ``config`` its settings."""

    fold: Fold
    seed: int
    path: Path
    config: TrainConfig

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def done(self) -> bool:
        return (self.path / DONE_NAME).is_file()

    def command(self) -> list[str]:
        """The training command (run in ``path``): a fresh start, ``--resume`` or ``--overwrite``."""
        words = [sys.executable, "-m", "train_ppo_lstm", "--config", TRAIN_CONFIG_NAME]
        held = CheckpointDir(self.path / self.config.checkpoint_dir).describe_run()
        if held is not None:
            words.append("--resume" if held[1] else "--overwrite")
        return words

    def write_config(self) -> None:
        header = (f"Walk-forward job {self.name}: fold {self.fold.k}'s training bars, seed {self.seed}",)
        text = config_yaml(self.config, header)
        self.path.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(self.path / TRAIN_CONFIG_NAME, lambda handle: handle.write(text.encode("utf-8")))


def job_config(train: TrainConfig, data: list[str], start: str, end: str, seed: int, threads: int) -> TrainConfig:
    """A job's training settings: the walk-forward's, on bars ``start..end`` (ISO stamps, both
    inclusive) of the absolute ``data`` paths, with its ``seed`` and ``threads``."""
    return dataclasses.replace(train, data=data[0] if len(data) == 1 else data, data_start=start, data_end=end,
                               seed=seed, threads=threads, checkpoint_dir="checkpoints", log_file="training.log",
                               progress=False, resume=False, overwrite=False)


def threads_per_job(train: TrainConfig, jobs: int) -> int:
    """Torch threads of each job: the trainer's own default (``threads_per_worker``): ``--threads``,
    else ``OMP_NUM_THREADS`` when set, else 1, whatever the number of ``jobs`` run at once.

    The models are too small to gain from intra-op threads, and a job given several threads on
    a machine that other processes also use crawls (docs/walkforward.md#how-often-the-verdict-is-wrong); ``jobs``
    is kept for the callers and does not change the count.
    """
    return threads_per_worker(train)


class JobFailed(Exception):
    """A job's training ended with an error; ``str`` names it and its log."""


def run_jobs(jobs: list[Job], parallel: int, finish: Callable[[Job], None], progress: bool) -> Optional[int]:
    """Run the unfinished ``jobs``, ``parallel`` at once; ``finish(job)`` trades its test window
    and writes its marker. Returns None when all are done, the signal's exit code (130/143)
    when interrupted. Raises :class:`JobFailed` for a training that failed."""
    todo = [job for job in jobs if not job.done]
    lock = threading.Lock()
    running: dict[str, subprocess.Popen] = {}
    stopped: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        with lock:
            if stopped:
                return
            stopped.append(signum)
            for process in running.values():
                process.send_signal(signum)

    def run(job: Job) -> int:
        with lock:
            if stopped:
                return -1
            job.write_config()
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
            with open(job.path / "stdout.txt", "ab") as out:
                process = subprocess.Popen(job.command(), cwd=job.path, env=env, stdout=out,
                                           stderr=subprocess.STDOUT, start_new_session=True)
            running[job.name] = process
        code = process.wait()
        with lock:
            running.pop(job.name, None)
        if code == 0 and not stopped:
            finish(job)
        return code

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    failed: list[str] = []
    try:
        with ThreadPoolExecutor(max_workers=parallel) as pool, \
                tqdm(total=len(jobs), initial=len(jobs) - len(todo), desc="jobs", unit="job",
                     disable=not progress) as bar:
            futures = {pool.submit(run, job): job for job in todo}
            for future in as_completed(futures):
                code = future.result()
                job = futures[future]
                if code == 0:
                    bar.update(1)
                elif code != -1 and not stopped:
                    failed.append(f"{job.name} (exit {code}; see {job.path / 'training.log'} and "
                                  f"{job.path / 'stdout.txt'})")
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if stopped:
        return 128 + stopped[0]
    if failed:
        raise JobFailed(f"{len(failed)} job(s) failed: {failed[0]}; fix it and rerun the same command to resume")
    return None
