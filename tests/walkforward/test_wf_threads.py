"""The torch threads each walk-forward job gets (ppo_lstm.walkforward.jobs.threads_per_job): the
trainer's own default, 1 unless --threads or OMP_NUM_THREADS says otherwise, whatever --jobs is,
so the default does not crawl on a machine other processes share. Fast, nothing trains."""
from __future__ import annotations

from pathlib import Path

import pytest

from ppo_lstm.walkforward.cli import parse_command_line, plan
from test_wf_bad_input import SMALL, data  # noqa: F401 - ``data`` is the fixture of a 300-bar daily walk


@pytest.mark.parametrize("jobs, extra, omp, threads", [
    ("1", [], None, 1), ("2", [], None, 1), ("1", ["--threads", "3"], None, 3), ("2", [], "2", 2),
])
def test_each_job_gets_the_trainers_default_threads(data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    jobs: str, extra: list[str], omp: str | None,
                                                    threads: int) -> None:
    if omp is None:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", omp)
    command = parse_command_line(["--data", str(data), "--out", str(tmp_path / "out"), "--folds", "2",
                                  "--test-size", "20", "--jobs", jobs, *extra, *SMALL])
    p = plan(command.wf, command.train)
    assert {job.config.threads for job in p.jobs} == {threads}
