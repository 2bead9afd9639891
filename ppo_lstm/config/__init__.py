"""A training run's settings, in one place (none of it imports torch or ``ppo_lstm.train``).

- ``schema.py``: :class:`TrainConfig`, every setting of a run, and :func:`setting`, which makes one;
- ``command_line.py``: the flags built from it, the parse of a command line, the run's ``config.yaml``;
- ``flags.py``: a dataclass field as a flag, and a command line read with its ``--config`` file;
- ``files.py``: YAML and TOML config files, read and written;
- ``values.py``: a file's values typed as their flags type them, and durations;
- ``plan.py``: the batch rule and :class:`BatchPlan`, the batch, minibatches and rates of a run;
- ``checks.py``: one-line refusals of impossible settings;
- ``migrate.py``: saved settings of any format as this version reads them;
- ``resolve.py``: :func:`resolve`, a launch's settings from its command line and its checkpoint.

Import from the module that holds a name (``from ppo_lstm.config.schema import TrainConfig``).
"""
