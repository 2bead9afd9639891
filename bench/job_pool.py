"""The process pool of the learning benches: spawned training processes that end with the bench.

A ``ProcessPoolExecutor``'s processes outlive a parent that is killed (``kill``, ``pkill``, a
closed terminal): they train on, unseen, and slow whatever runs next. Each process of
:func:`job_pool` watches its parent and exits once the parent is gone.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor

PARENT_POLL_S = 1.0  # how often a pool process checks that its parent still runs


def job_pool(jobs: int) -> ProcessPoolExecutor:
    """``jobs`` spawned processes that exit within about :data:`PARENT_POLL_S` of this
    process's end, however it ends."""
    return ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("spawn"),
                               initializer=_exit_with_parent, initargs=(os.getpid(),))


def _exit_with_parent(parent: int) -> None:
    """In a pool process: a daemon thread that ends the process once ``parent`` is no longer
    its parent (it died, and the process was handed to another)."""
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()
