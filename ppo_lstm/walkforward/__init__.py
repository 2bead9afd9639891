"""Walk-forward evaluation: many folds, many seeds, baselines on the same bars, and a
verdict on the edge over buy-and-hold (``walkforward-ppo-lstm``; docs/walkforward.md).

Files:

- ``config.py``: :class:`WalkForwardConfig` (the walk-forward flags) and the parser that adds
  them to every training flag;
- ``folds.py``: the test windows and each fold's training bars;
- ``jobs.py``: the (fold, seed) trainings as subprocesses of the training command, each in
  its own run dir, run ``--jobs`` at a time, resumable;
- ``state.py``: ``walkforward.json``, the settings and data fingerprint a rerun must match;
- ``tuned_span.py``: the bars a tuning study read, and the check that no test window lies among them;
- ``policies.py``: the seed ensemble and the baselines (flat, MA 10/40) as agent-like policies;
- ``trading.py``: trading a fold's test window with the backtest engine;
- ``results.py``: the stitched returns, their figures and the verdict (via ``ppo_lstm.stats``);
- ``report.py``: walkforward.csv, oos_returns.csv, summary.json, report.md, report.png;
- ``cli.py``: the command.
"""
