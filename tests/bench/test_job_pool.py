"""bench/job_pool.py: a pool process of a learning bench ends once the bench is killed."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

BENCH = """
import os, sys, time
sys.path.insert(0, {root!r})
from bench.job_pool import job_pool

if __name__ == "__main__":
    with job_pool(1) as pool:
        print(pool.submit(os.getpid).result(), flush=True)  # the pool's one process
        pool.submit(time.sleep, 600).result()  # a long job: the bench is killed during it
"""


def ended(pid: int) -> bool:
    """``pid`` is gone, or a zombie waiting for its new parent to reap it."""
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return True


@pytest.mark.e2e
def test_a_killed_bench_leaves_no_pool_process(tmp_path: Path) -> None:
    script = tmp_path / "bench_like.py"
    script.write_text(textwrap.dedent(BENCH.format(root=str(ROOT))))
    bench = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path, stdout=subprocess.PIPE, text=True)
    child = None
    try:
        child = int(bench.stdout.readline())
        assert not ended(child)
        os.kill(bench.pid, signal.SIGKILL)  # no handler, no clean-up: as `kill -9` or a lost terminal
        bench.wait(10)
        deadline = time.monotonic() + 10
        while not ended(child) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert ended(child), "the pool process trained on after its bench was killed"
    finally:
        if child is not None and not ended(child):
            os.kill(child, signal.SIGKILL)  # a failed check leaves nothing sleeping either
        bench.kill()
        bench.wait(10)
        bench.stdout.close()
