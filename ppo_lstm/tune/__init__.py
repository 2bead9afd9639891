"""Hyperparameter search with Optuna on the hold-out (``tune-ppo-lstm``; docs/tuning.md).

- ``config.py``: TuneConfig, the tuning flags, added to the training parser.
- ``space.py``: the search space (flag names to distributions) and the built-in one.
- ``storage.py``: the storage URL (SQLite, PostgreSQL, MySQL, journal file), creating or
  loading a study when processes race, and the settings a study was created with.
- ``queue.py``: ``--trials`` as slots that processes take atomically; heartbeats; stale trials
  failed and their slots queued again.
- ``objective.py``: one trial: a training run per seed in a process of its own, its hold-out
  backtests reported to the pruner.
- ``holdout_alpha.py``: a seed's ``best.pt`` backtested again on its hold-out: the per-bar Sharpe
  ratio of its returns hedged of buy-and-hold's (the walk-forward DSR's units).
- ``runner.py``: the worker loop, in one process or ``--jobs`` spawned processes.
- ``report.py``: best.yaml, the top trials, importances, history.png.
- ``study_stats.py``: ``trial_stats``, the trial count, the trials' Sharpe ratios and the bars the
  study read, for the walk-forward.
- ``cli.py``, ``__main__.py``: the command line.
"""
