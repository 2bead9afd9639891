"""``serve-ppo-lstm``: a trained policy as a long-lived HTTP server, one session per instrument.

- ``cli.py``: the command line (``serve-ppo-lstm``, ``python -m ppo_lstm.serve``): checks, the state
  dir's lock, loading the policy and the sessions, binding, uvicorn, the graceful stop;
- ``app.py``: the FastAPI app: its endpoints, every error as JSON, its middleware;
- ``models.py``: the request and response bodies (pydantic), which make the OpenAPI page;
- ``store.py``: the sessions by name, the state dir (its lock, the state files, loading them at start);
- ``session.py``: one session: its ``TradingPolicy`` stream, the one-bar-once rule, the state written
  before each answer, gaps;
- ``state_files.py``: a session's state files, one generation per change, each renamed to a fresh name;
- ``history.py``: a session's history through the data loader, its chain before the last bar, its widest gap;
- ``access.py``: the bind address, the bearer token, the body size limit (ASGI middleware);
- ``errors.py``: ``RequestError``, a refused request and its HTTP status.

It needs the ``serve`` extra (FastAPI and uvicorn). With an ONNX model nothing here imports torch or pandas.
"""
