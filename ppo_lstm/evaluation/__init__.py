"""Evaluating a trained policy: backtests, metrics and reports.

- ``cli.py``: the evaluation command line (``evaluate-ppo-lstm``, ``python -m ppo_lstm.evaluate``);
- ``loading.py``: a checkpoint's file, agent, config and training-data fingerprint;
- ``backtest.py``: ``backtest_history`` and ``backtest_simulated`` (``play_simulated`` then ``chain_simulated``);
- ``engine.py``: the policy stepped bar by bar beside buy-and-hold, and the closed trades;
- ``samples.py``: which of a backtest's bars the run trained on, which chose ``best.pt``, which are out of sample;
- ``metrics.py``: trading metrics (returns, Sharpe, drawdown, trades, ...);
- ``report.py``: the report table, JSON, equity CSV and plot of a backtest;
- ``plots.py``: plotting helpers shared by the report and the training curves;
- ``plot_training.py``: training curves from metrics.csv (``python -m ppo_lstm.plot_training``).
"""
