"""Training orchestration: one worker's run from its run dir to its last checkpoint.

- ``trainer.py``: ``Trainer.run``: collect, exchange, update, log, hold-out, checkpoint;
- ``guard.py``: ``UpdateGuard``, which undoes and counts non-finite updates, alike on every rank;
- ``messages.py``: the start-up lines, each update's metrics.csv row and the end-of-run summary;
- ``worker.py``: the body of every worker (``train_worker``);
- ``run_dir.py``: resume, the run lock and run-dir claiming, for the command line and the workers;
- ``run_state.py``: ``RunState``, the counters, episode quotas and the checkpoint dict;
- ``holdout.py``: which bars train and which are held out, and the hold-out backtest;
- ``data_fingerprint.py``: the training data's fingerprint in checkpoints, and the ``--resume`` check on it;
- ``agreement.py``: the one collective of each iteration (``exchange``);
- ``build.py``: the agent and optimizer from a config, and the model-fits-checkpoint check;
- ``eager_adam.py``: ``EagerAdam``, torch's Adam without the import of ``torch._dynamo`` on its first call;
- ``shutdown.py``: ``StopRequest`` (SIGINT / SIGTERM);
- ``time_limit.py``: ``--time-limit``, the wall-clock budget of one invocation;
- ``timing.py``: per-phase clocks and peak memory.
"""
