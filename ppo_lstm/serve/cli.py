"""``serve-ppo-lstm``: a trained policy as a long-lived HTTP server (FastAPI on uvicorn).

    serve-ppo-lstm --checkpoint runs/spy --state-dir serve-state
    serve-ppo-lstm --model spy.onnx --state-dir serve-state --host 0.0.0.0 --port 8000 --token-file token

(also ``python -m ppo_lstm.serve``). The order at start: the flags and the bind address are checked,
the token read, the state dir locked (a second server on it is refused), the policy loaded, every
session's state file loaded, and the socket bound; then one ``serving`` line on stdout and the app
serves until SIGTERM or SIGINT, which finish the requests in flight, write every state and exit 0.
Bad input at start: one ``error:`` line on stderr, exit code 2. ``--model`` imports no torch.
"""
from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any, Callable, Optional

from ..deploy.bars import with_costs
from ..deploy.files import HeldLock
from ..deploy.policy import TradingPolicy
from ..errors import EXIT_USAGE, OneLineParser, Switch, UsageError, one_line
from .access import check_bind, read_token
from .store import SessionStore, lock_state_dir

MAX_BODY = 8 * 1024 * 1024
KEEP_ALIVE_S = 75  # an idle connection is kept this long (uvicorn's 5 s would drop a client between minute bars)


def build_parser(prog: Optional[str] = None) -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=prog or "python -m ppo_lstm.serve",
        description="Serve a trained policy over HTTP: one session per instrument, each fed one closed bar at a "
                    "time and answered with the decision for the next bar (evaluate-ppo-lstm's decisions).",
        epilog="Endpoints and their bodies: http://HOST:PORT/docs. Every change is written to --state-dir before it "
               "is answered; a restart on the same --state-dir goes on where it stood. Bad input at start: one "
               "'error:' line on stderr, exit code 2.")
    policy = parser.add_mutually_exclusive_group(required=True)
    policy.add_argument("--checkpoint", type=Path, metavar="PATH",
                        help="a .pt file, or a checkpoint dir (its best.pt, else the checkpoint 'latest' names)")
    policy.add_argument("--model", type=Path, metavar="FILE",
                        help="an ONNX file written by export-ppo-lstm (onnxruntime; torch is not imported)")
    parser.add_argument("--state-dir", required=True, type=Path, metavar="DIR",
                        help="where each session's state file is kept (created if missing; one server at a time)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind; one that is not loopback needs "
                        "--token-file")
    parser.add_argument("--port", type=int, default=8000, help="port to bind (0: a free one, printed at start)")
    parser.add_argument("--token-file", type=Path, metavar="FILE", help="a file holding the bearer token every "
                        "request must send (Authorization: Bearer TOKEN), at least 16 characters")
    parser.add_argument("--fsync", action=Switch, default=True, help="fsync each state file (and its directory) "
                        "before answering: a state survives a lost machine, not only a killed server")
    parser.add_argument("--max-body-bytes", type=int, default=MAX_BODY, metavar="N",
                        help="the largest request body (a session's history is the largest)")
    parser.add_argument("--fee-bps", type=float, metavar="BPS", help="fee per traded notional, overriding the "
                        "checkpoint's")
    parser.add_argument("--slippage-bps", type=float, metavar="BPS", help="adverse fill slippage, overriding the "
                        "checkpoint's")
    parser.add_argument("--device", default="cpu", metavar="DEV", help="with --checkpoint: torch device")
    parser.add_argument("--log-level", default="warning", choices=("critical", "error", "warning", "info", "debug"),
                        help="uvicorn's log level ('info' logs every request)")
    return parser


def policy_factory(args: argparse.Namespace) -> Callable[[], TradingPolicy]:
    """A maker of fresh streams of the served policy: the model is loaded once, its step shared."""
    if args.model is not None:
        if args.device != "cpu":
            raise UsageError("--device is for --checkpoint; --model runs on onnxruntime's CPU provider")
        from ..deploy.onnx_model import OnnxStep

        step: Any = OnnxStep(args.model)
        spec = step.spec
    else:
        from ..deploy.torch_step import checkpoint_step
        from ..evaluation.loading import policy_device

        spec, step = checkpoint_step(args.checkpoint, policy_device(args.device))
    env = with_costs(spec.env, args.fee_bps, args.slippage_bps)
    return lambda: TradingPolicy(spec, step, env)


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (UsageError, one line, when it cannot be had)."""
    if not 0 <= port <= 65535:
        raise UsageError(f"--port {port} is not a port (0 to 65535)")
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
    except OSError as err:
        raise UsageError(f"--host {host}: {err.strerror or err}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as err:
        sock.close()
        raise UsageError(f"cannot listen on {host}:{port}: {err.strerror or err}") from None
    return sock


def prepare(args: argparse.Namespace) -> tuple[Any, socket.socket, HeldLock, str]:
    """The app, its socket, the state dir's lock and the start-up line (UsageError for bad input)."""
    token = None if args.token_file is None else read_token(args.token_file)
    check_bind(args.host, token)
    if args.max_body_bytes < 1024:
        raise UsageError(f"--max-body-bytes {args.max_body_bytes}: at least 1024")
    lock = lock_state_dir(args.state_dir)
    try:
        make_policy = policy_factory(args)
        store = SessionStore(args.state_dir, make_policy, args.fsync)
        loaded = store.load()
        sample = make_policy()
        from .app import create_app  # FastAPI is imported once the checks above have passed

        info = {"route": sample.spec.backend, "fingerprint": sample.spec.fingerprint, "fsync": args.fsync}
        app = create_app(store, info, token, args.max_body_bytes, store.flush)
        sock = bind(args.host, args.port)
    except BaseException:
        lock.release()
        raise
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    line = (f"serving {sample.spec.source} ({sample.spec.backend}, fingerprint {sample.spec.fingerprint[:12]}) on "
            f"http://{shown}:{port}, {loaded} session{'s' if loaded != 1 else ''} from {args.state_dir} "
            f"(fsync {'on' if args.fsync else 'off'}{', bearer token' if token else ''})")
    return app, sock, lock, line


def serve(app: Any, sock: socket.socket, log_level: str) -> None:
    """Run uvicorn on ``sock`` until SIGTERM or SIGINT, then stop gracefully (requests in flight finished)."""
    import uvicorn

    stopped: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGINT):  # uvicorn re-raises the signal it stopped on: end with 0 instead
        signal.signal(sig, lambda signum, _: stopped.append(signum))
    config = uvicorn.Config(app, log_level=log_level, access_log=log_level in ("info", "debug"),
                            timeout_graceful_shutdown=30, timeout_keep_alive=KEEP_ALIVE_S, lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])


def main(argv: Optional[list[str]] = None, prog: Optional[str] = None) -> int:
    """The CLI; returns the exit code (2 for bad input at start, one line on stderr)."""
    if prog is None and os.path.basename(sys.argv[0]) == "serve-ppo-lstm":
        prog = "serve-ppo-lstm"
    args = build_parser(prog).parse_args(argv)
    try:
        app, sock, lock, line = prepare(args)
    except UsageError as err:
        print(f"error: {one_line(err, 1000)}", file=sys.stderr)
        return EXIT_USAGE
    try:
        print(line, flush=True)
        serve(app, sock, args.log_level)
    finally:
        lock.release()
        sock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
