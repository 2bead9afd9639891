"""Latency per bar of a deployed policy: in process, over HTTP (``serve-ppo-lstm``), and per call of
``predict-ppo-lstm --state``; the server's memory under load; the ONNX route's import.

The model is trained here at the default network and env sizes (hidden 64, LSTM 64, window 32, EMA
span 500, no feature columns; a few updates: the latency does not depend on what it learned) on a
synthetic daily file, and exported to ONNX. Every case warms a stream on the file's first
``--history`` bars, then times each of the next ``--bars`` bars:

* ``TradingPolicy.update`` in this process, on torch (the checkpoint) and on ONNX;
* ``POST /sessions/NAME/bars`` to ``serve-ppo-lstm --model`` on 127.0.0.1, one session, with httpx
  (a keep-alive connection), with the state fsynced per bar (the default) and without (--no-fsync);
* the same with a minimal client (asyncio streams writing HTTP/1.1 requests: the client's own CPU,
  which shares the machine with the server, stays small), one session and ``--sessions`` sessions
  posting concurrently (one connection each; --no-fsync), ``--bars`` bars each: every request's
  latency, the errors, the server's CPU per bar, and its resident memory after the sessions opened
  and after every bar was served;
* ``predict-ppo-lstm --state`` once per new bar (a fresh process per call, ``--calls`` calls), with
  ``--model`` and with ``--checkpoint``.

The import of the ONNX route (``TradingPolicy``, ``OnnxStep`` and onnxruntime; then predict's and the
server's command modules) is timed in fresh processes (CPU seconds, median of 5), beside its parts and
torch's and pandas'; the route's rows fail the bench if torch or pandas comes in. ``--only-imports`` times
the imports alone (the table's import rows and the JSON line, without the latency rows).

    python bench/serve_latency.py [--bars 1000] [--sessions 50] [--history 600] [--calls 5] [--only-imports]

Prints a table and one JSON line. The machine is shared: compare the rows of one run.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), "OMP_NUM_THREADS": "1"}
IMPORTS = {
    "ONNX route (TradingPolicy, OnnxStep, onnxruntime)":
        "from ppo_lstm.deploy.policy import TradingPolicy; from ppo_lstm.deploy.onnx_model import OnnxStep; "
        "import onnxruntime",
    "predict-ppo-lstm --model's modules (+ onnxruntime)":
        "import ppo_lstm.deploy.predict; from ppo_lstm.deploy.onnx_model import OnnxStep; import onnxruntime",
    "serve-ppo-lstm --model's modules (+ FastAPI, uvicorn)":
        "import ppo_lstm.serve.cli, ppo_lstm.serve.app, uvicorn; from ppo_lstm.deploy.onnx_model import OnnxStep; "
        "import onnxruntime",
    "numpy + onnxruntime alone": "import numpy, onnxruntime",
    "pandas alone (with numpy)": "import pandas",
    "envs.observation alone (numpy, gymnasium)": "import envs.observation",
    "torch alone, for comparison": "import torch",
}


def write_prices(path: Path, bars: int, seed: int = 7) -> pd.DataFrame:
    """``bars`` business days of a random walk with regimes of drift (prices in cents), opens off the last close."""
    rng = np.random.default_rng(seed)
    drift = np.repeat(rng.choice([-0.003, 0.003], size=bars // 40 + 1), 40)[:bars]
    close = np.round(100.0 * np.exp(np.cumsum(drift + 0.012 * rng.standard_normal(bars))), 2)
    open_ = np.round(np.r_[100.0, close[:-1]] * np.exp(0.002 * rng.standard_normal(bars)), 2)
    frame = pd.DataFrame({"Date": pd.bdate_range("2015-01-01", periods=bars).strftime("%Y-%m-%d"), "Open": open_,
                          "High": np.maximum(open_, close) + 0.25, "Low": np.minimum(open_, close) - 0.25,
                          "Close": close, "Volume": rng.integers(1000, 5000, bars).astype(float)})
    frame.to_csv(path, index=False)
    return frame


def run(*command: object, cwd: Path) -> str:
    done = subprocess.run([str(c) for c in command], cwd=cwd, env=ENV, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"bench/serve_latency.py: {' '.join(map(str, command[:4]))} failed: {done.stderr[-2000:]}")
    return done.stdout


def make_model(work: Path, rows: int) -> tuple[Path, Path, pd.DataFrame]:
    """The checkpoint dir and ONNX model of a default-size policy trained briefly on ``work/prices.csv``."""
    frame = write_prices(work / "prices.csv", rows)
    run(sys.executable, ROOT / "train_ppo_lstm.py", "--data", "prices.csv", "--episodes", "32", "--num-envs", "8",
        "--checkpoint-dir", "ck", "--no-progress", "--seed", "1", cwd=work)
    run(sys.executable, "-m", "ppo_lstm.deploy.export_onnx", "--checkpoint", "ck", "--onnx", "policy.onnx", cwd=work)
    return work / "ck", work / "policy.onnx", frame


def bar(row: Any) -> dict[str, Any]:
    return {"time": row.Date, "open": row.Open, "high": row.High, "low": row.Low, "close": row.Close,
            "volume": row.Volume}


def stats(ms: list[float]) -> dict[str, float]:
    return {"p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99)), "n": len(ms)}


def in_process(policy: Any, frame: pd.DataFrame, history: int) -> dict[str, float]:
    """``TradingPolicy.update`` per bar, after a warm-up on the first ``history`` bars."""
    policy.warm_up(frame.iloc[:history])
    ms = []
    for row in frame.iloc[history:].itertuples():
        start = time.perf_counter()
        policy.update(row.Date, row.Open, row.High, row.Low, row.Close, row.Volume)
        ms.append((time.perf_counter() - start) * 1e3)
    return stats(ms)


class Server:
    """``python -m ppo_lstm.serve`` on a free port of 127.0.0.1."""

    def __init__(self, model: Path, state: Path, *flags: str) -> None:
        self.errors = tempfile.TemporaryFile()
        self.process = subprocess.Popen([sys.executable, "-m", "ppo_lstm.serve", "--model", str(model),
                                         "--state-dir", str(state), "--port", "0", *flags], cwd=ROOT, env=ENV,
                                        stdout=subprocess.PIPE, stderr=self.errors, text=True)
        line = self.process.stdout.readline()
        match = re.search(r"on (http://[\d.]+:\d+),", line)
        if not match:
            self.errors.seek(0)
            raise SystemExit(f"bench/serve_latency.py: the server did not start: {line}{self.errors.read()!r}")
        self.url = match.group(1)

    def rss_mb(self) -> float:
        text = Path(f"/proc/{self.process.pid}/status").read_text()
        return int(re.search(r"VmRSS:\s+(\d+) kB", text).group(1)) / 1024

    def stop(self) -> None:
        self.process.terminate()
        if self.process.wait(timeout=60) != 0:
            raise SystemExit(f"bench/serve_latency.py: the server exited {self.process.returncode}")


def http_one(model: Path, frame: pd.DataFrame, history: int, work: Path, fsync: bool) -> dict[str, float]:
    """One session over HTTP: each bar's round trip, the state written before its answer."""
    import httpx

    state = work / f"state-one-{fsync}"
    server = Server(model, state, "--fsync" if fsync else "--no-fsync")
    bodies = [bar(row) for row in frame.itertuples()]
    try:
        with httpx.Client(base_url=server.url, timeout=30.0) as client:
            client.post("/sessions/one", json={"bars": bodies[:history]}).raise_for_status()
            ms = []
            for body in bodies[history:]:
                start = time.perf_counter()
                client.post("/sessions/one/bars", json=body).raise_for_status()
                ms.append((time.perf_counter() - start) * 1e3)
    finally:
        server.stop()
    return stats(ms)


async def post_raw(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str,
                   body: dict[str, Any]) -> tuple[int, bytes]:
    """One keep-alive HTTP/1.1 POST of ``body`` as JSON (a minimal client: the load generator's own cost stays
    small beside the server's); the status and the body of the answer."""
    data = json.dumps(body).encode()
    writer.write(b"POST %s HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                 % (path.encode(), len(data)) + data)
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")[1:]
                  if line.lower().startswith(b"content-length:"))
    return int(head.split(b" ", 2)[1]), await reader.readexactly(length)


def process_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def http_raw(model: Path, frame: pd.DataFrame, history: int, sessions: int, work: Path) -> dict[str, Any]:
    """``sessions`` sessions posting their bars at once, each on its own connection (the minimal client;
    --no-fsync); every request's latency, the errors, the server's CPU and its memory."""
    import httpx

    server = Server(model, work / f"state-raw-{sessions}", "--no-fsync")
    bodies = [bar(row) for row in frame.itertuples()]
    host, port = server.url.removeprefix("http://").split(":")
    try:
        with httpx.Client(base_url=server.url, timeout=60.0) as client:
            for i in range(sessions):
                client.post(f"/sessions/s{i}", json={"bars": bodies[:history]}).raise_for_status()
        before, cpu_before = server.rss_mb(), process_cpu_s(server.process.pid)
        ms: list[float] = []
        errors: list[str] = []

        async def feed(name: str) -> None:
            reader, writer = await asyncio.open_connection(host, int(port))
            try:
                for body in bodies[history:]:
                    start = time.perf_counter()
                    try:
                        status, answer = await post_raw(reader, writer, f"/sessions/{name}/bars", body)
                        if status != 200:
                            errors.append(f"{status} {answer[:200]!r}")
                    except (OSError, asyncio.IncompleteReadError) as err:
                        errors.append(repr(err))
                        return
                    ms.append((time.perf_counter() - start) * 1e3)
            finally:
                writer.close()

        async def load() -> float:
            start = time.perf_counter()
            await asyncio.gather(*(feed(f"s{i}") for i in range(sessions)))
            return time.perf_counter() - start

        seconds = asyncio.run(load())
        after, cpu = server.rss_mb(), process_cpu_s(server.process.pid) - cpu_before
    finally:
        server.stop()
    return {**stats(ms), "errors": len(errors), "first_errors": errors[:3], "seconds": seconds,
            "bars_per_s": len(ms) / seconds, "server_cpu_ms_per_bar": cpu / max(len(ms), 1) * 1e3,
            "rss_mb_before": before, "rss_mb_after": after}


def predict_calls(route: list[str], frame: pd.DataFrame, history: int, calls: int, work: Path) -> dict[str, float]:
    """``predict-ppo-lstm --state`` per new bar: the wall time of each call, a fresh process each."""
    live, state = work / "live.csv", work / f"predict-{route[0][2:]}.state.json"
    state.unlink(missing_ok=True)
    command = [sys.executable, "-m", "ppo_lstm.predict", *route, "--data", str(live), "--state", str(state), "--json"]
    frame.iloc[:history].to_csv(live, index=False)
    run(*command, cwd=work)  # the first call replays the history
    ms = []
    for i in range(calls):
        frame.iloc[:history + i + 1].to_csv(live, index=False)
        start = time.perf_counter()
        out = run(*command, cwd=work)
        ms.append((time.perf_counter() - start) * 1e3)
        assert json.loads(out)["new_bars"] == 1
    return stats(ms)


def import_cpu(code: str, repeats: int = 5) -> float:
    """Median CPU seconds of ``code`` in a fresh process (``time.process_time`` around it); checks torch (and,
    for the project's modules, pandas) stay out."""
    probe = (f"import time, sys; t = time.process_time(); {code}; c = time.process_time() - t; "
             f"print(c, 'torch' in sys.modules, 'pandas' in sys.modules)")
    found = []
    for _ in range(repeats):
        cpu, torch_in, pandas_in = run(sys.executable, "-c", probe, cwd=ROOT).split()
        if "torch" not in code and torch_in == "True":
            raise SystemExit(f"bench/serve_latency.py: {code} imported torch")
        if "ppo_lstm" in code and pandas_in == "True":
            raise SystemExit(f"bench/serve_latency.py: {code} imported pandas")
        found.append(float(cpu))
    return statistics.median(found)


def machine() -> str:
    import importlib.util

    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    extras = [name for name in ("httptools", "uvloop") if importlib.util.find_spec(name) is not None]
    return (f"{cpu}, {os.cpu_count()} cores; Python {platform.python_version()}; uvicorn with "
            f"{' and '.join(extras) if extras else 'h11 and asyncio'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bars", type=int, default=1000, help="bars timed per case and per session (default 1000)")
    parser.add_argument("--sessions", type=int, default=50, help="concurrent sessions of the load case (default 50)")
    parser.add_argument("--history", type=int, default=600, help="bars each stream is warmed on (default 600)")
    parser.add_argument("--calls", type=int, default=5, help="predict-ppo-lstm calls per route (default 5)")
    parser.add_argument("--only-imports", action="store_true", help="time the imports alone")
    parser.add_argument("--in-process-repeats", type=int, default=1,
                        help="runs of each in-process case, each its own row (a p99 of 1,000 bars moves run to run)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="serve-latency-"))
    load_before = Path("/proc/loadavg").read_text().split()[:3]
    try:
        report = measure_imports() if args.only_imports else measure(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report["loadavg_before_after"] = [load_before, Path("/proc/loadavg").read_text().split()[:3]]
    show(report, args)


def measure_imports() -> dict[str, Any]:
    """The import rows alone (``--only-imports``)."""
    from importlib.metadata import version

    return {"bench": "serve_latency", "machine": machine(), "torch": version("torch"), "rows": {},
            "import_cpu_s": {name: import_cpu(code) for name, code in IMPORTS.items()}}


def measure(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    from ppo_lstm import TradingPolicy

    checkpoint, model, frame = make_model(work, args.history + args.bars)
    runs = args.in_process_repeats
    named = (lambda case, k: case if runs == 1 else f"{case}, run {k + 1} of {runs}")
    rows: dict[str, Callable[[], dict[str, Any]]] = {}
    for k in range(runs):
        rows[named("in-process TradingPolicy, torch", k)] = \
            lambda: in_process(TradingPolicy.load(checkpoint), frame, args.history)
        rows[named("in-process TradingPolicy, ONNX", k)] = \
            lambda: in_process(TradingPolicy.from_onnx(model), frame, args.history)
    rows.update({
        "HTTP, 1 session, fsync per bar": lambda: http_one(model, frame, args.history, work, True),
        "HTTP, 1 session, --no-fsync": lambda: http_one(model, frame, args.history, work, False),
        "HTTP, 1 session, --no-fsync, minimal client": lambda: http_raw(model, frame, args.history, 1, work),
        f"HTTP, {args.sessions} sessions at once, --no-fsync, minimal client":
            lambda: http_raw(model, frame, args.history, args.sessions, work),
        "predict-ppo-lstm --state per call, --model": lambda: predict_calls(["--model", str(model)], frame,
                                                                            args.history, args.calls, work),
        "predict-ppo-lstm --state per call, --checkpoint": lambda: predict_calls(["--checkpoint", str(checkpoint)],
                                                                                 frame, args.history, args.calls,
                                                                                 work),
    })
    results = {name: case() for name, case in rows.items()}
    imports = {name: import_cpu(code) for name, code in IMPORTS.items()}
    return {"bench": "serve_latency", "machine": machine(), "torch": torch.__version__, "bars": args.bars,
            "sessions": args.sessions, "history": args.history, "rows": results, "import_cpu_s": imports}


def show(report: dict[str, Any], args: argparse.Namespace) -> None:
    before, after = report["loadavg_before_after"]
    if not report["rows"]:  # --only-imports
        print(f"{report['machine']}; torch {report['torch']}; imports only")
        print(f"load average (1, 5, 15 min) {' '.join(before)} before, {' '.join(after)} after")
        show_imports(report)
        return
    print(f"{report['machine']}; torch {report['torch']} (one thread); a default-size policy (window 32, EMA 500, "
          f"hidden 64, LSTM 64), warmed on {args.history} bars")
    print(f"load average (1, 5, 15 min) {' '.join(before)} before, {' '.join(after)} after")
    print(f"{'case':<64}{'p50 ms':>9}{'p99 ms':>9}{'n':>8}")
    for name, row in report["rows"].items():
        print(f"{name:<64}{row['p50_ms']:>9.3f}{row['p99_ms']:>9.3f}{row['n']:>8}")
    many = next(row for name, row in report["rows"].items() if "sessions at once" in name)
    print(f"load: {args.sessions} sessions x {args.bars} bars in {many['seconds']:.1f} s ({many['bars_per_s']:.0f} "
          f"bars/s, {many['server_cpu_ms_per_bar']:.2f} ms of server CPU a bar), {many['errors']} errors; server "
          f"memory {many['rss_mb_before']:.1f} MB after the sessions opened, {many['rss_mb_after']:.1f} MB after "
          f"every bar")
    print("httpx rows: httpx.Client on one keep-alive connection, as a trading loop would; minimal client rows: "
          "asyncio streams, one connection a session")
    print(f"predict-ppo-lstm rows: {args.calls} calls each (p99: the slowest)")
    show_imports(report)


def show_imports(report: dict[str, Any]) -> None:
    """The import rows and the JSON line."""
    print("import, CPU seconds in a fresh process (median of 5):")
    for name, cpu in report["import_cpu_s"].items():
        print(f"  {name:<56}{cpu:>6.3f}")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
