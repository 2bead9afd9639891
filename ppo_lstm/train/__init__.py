"""Training orchestration: one worker's run from its run dir to its last checkpoint.

- ``trainer.py``: ``Trainer.run``: collect, exchange, update, log, hold-out, checkpoint;
- ``worker.py``: the body of every worker (``train_worker``);
- ``run_state.py``: ``RunState``, the counters, episode quotas and the checkpoint dict;
- ``holdout.py``: which bars train and which are held out, and the hold-out backtest;
- ``agreement.py``: the one collective of each iteration (``exchange``);
- ``build.py``: the agent and optimizer from a config, and the model-fits-checkpoint check;
- ``shutdown.py``: ``StopRequest`` (SIGINT / SIGTERM);
- ``timing.py``: per-phase clocks and peak memory.
"""
