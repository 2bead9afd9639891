"""The tuning command's settings: :class:`TuneConfig`, and its parser, which is the training
parser (every training flag and ``--config``) with a ``tuning`` group built from TuneConfig's
fields by the same rule (:func:`ppo_lstm.config.flags.add_field_flag`)."""
from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from envs.config import EnvConfig

from ..config.command_line import build_parser as build_train_parser
from ..config.schema import TrainConfig
from ..config.flags import add_config_group, parse_args
from ..errors import UsageError

TUNE_GROUP = "tuning: the study, its search space and its storage"


def _f(default: Any, help: str, **extra: Any) -> Any:
    return field(default=default, metadata={"help": help, **extra})


@dataclass
class TuneConfig:
    """Every option of ``tune-ppo-lstm`` that is not a training flag. Field ``foo_bar`` is ``--foo-bar``."""

    out: Optional[str] = _f(None, "the study's directory: trial run dirs, best.yaml, report.txt, history.png and "
                                  "the default SQLite storage (required)", metavar="DIR")
    study_name: Optional[str] = _f(None, "the study's name in its storage (default: the --out directory's name)",
                                   metavar="NAME")
    space: Optional[str] = _f(None, "YAML file mapping flag names to distributions, e.g. 'learning-rate-actor: "
                                    "{log-uniform: [1e-5, 1e-2]}' (default: the built-in PPO-LSTM space, "
                                    "docs/tuning.md)", metavar="FILE")
    trials: int = _f(20, "trials of the study in all, over every process and machine sharing it")
    seeds: int = _f(1, "training seeds per trial (--seed, --seed+1, ...); the objective is their mean")
    metric: str = _f("return", "the objective: the hold-out return (%%) or Sharpe ratio of each seed's best.pt (its "
                               "checkpoint of best hold-out return), the mean over seeds (with several instruments, "
                               "over them too)", choices=("return", "sharpe"))
    sampler: str = _f("tpe", "Optuna's sampler", choices=("tpe", "random"))
    sampler_seed: int = _f(0, "the sampler's seed (trial k samples with seed + k)")
    pruner: str = _f("median", "Optuna's pruner, judging each hold-out backtest of a trial",
                     choices=("median", "halving", "none"))
    startup_trials: int = _f(5, "trials sampled at random, and never pruned by the median pruner, before TPE "
                                "and pruning take over")
    jobs: int = _f(1, "trial processes on this machine (processes, never threads)")
    storage: Optional[str] = _f(None, "where the study lives: postgresql://..., mysql://..., sqlite:///FILE or "
                                      "journal:PATH (default: sqlite:///<out>/study.db)", metavar="URL")
    heartbeat: float = _f(10.0, "seconds between a running trial's heartbeats; a RUNNING trial silent for 6 of "
                                "them (its process was killed) is marked failed and queued again")
    report: bool = _f(False, "print the report of the existing study (and rewrite best.yaml, report.txt, "
                             "history.png) without running trials")


def build_parser(prog: Optional[str] = None) -> argparse.ArgumentParser:
    """The training parser plus the ``tuning`` group."""
    parser = build_train_parser(prog)
    parser.description = ("Tune the training flags with Optuna on the hold-out: each trial is an ordinary training "
                          "run dir under --out. Every training flag (and --config) sets the base configuration.")
    add_config_group(parser, TUNE_GROUP, TuneConfig, "tune.")
    return parser


@dataclass(frozen=True)
class TuneCommand:
    """A parsed command line: the base training config, the tuning settings, the training
    fields given (``"episodes"``, ``"env.fee_bps"``) and whether ``--print-config`` was asked."""

    base: TrainConfig
    tune: TuneConfig
    given: frozenset[str]
    print_config: bool


def parse_command_line(argv: Optional[list[str]] = None, prog: Optional[str] = None) -> TuneCommand:
    """Parse ``argv`` (and its ``--config`` file). A bad flag exits 2 in one line; a bad file
    or a missing ``--out`` raises :class:`UsageError`."""
    parsed = parse_args(build_parser(prog), argv)
    values = vars(parsed.namespace)
    tune = TuneConfig(**{k[5:]: v for k, v in values.items() if k.startswith("tune.")})
    train = {k: v for k, v in values.items() if not k.startswith("tune.")}
    if isinstance(train.get("data"), list) and len(train["data"]) == 1:
        train["data"] = train["data"][0]
    env = EnvConfig(**{k[4:]: v for k, v in train.items() if k.startswith("env.")})
    base = TrainConfig(env=env, **{k: v for k, v in train.items() if not k.startswith("env.")})
    if tune.out is None:
        raise UsageError("--out DIR is required: the directory of the study's trials and report")
    given = frozenset(g for g in parsed.given if not g.startswith("tune."))
    for name in ("checkpoint_dir", "log_file", "resume", "overwrite"):
        if name in given:
            raise UsageError(f"--{name.replace('_', '-')} is set by the study for each trial "
                             f"(<out>/trial-NNNN); leave it out")
    if tune.trials < 1 or tune.seeds < 1 or tune.jobs < 1 or tune.startup_trials < 0:
        raise UsageError(f"--trials, --seeds and --jobs must be at least 1 and --startup-trials at least 0, got "
                         f"{tune.trials}, {tune.seeds}, {tune.jobs} and {tune.startup_trials}")
    if not tune.heartbeat > 0:
        raise UsageError(f"--heartbeat must be > 0 seconds, got {tune.heartbeat}")
    if tune.study_name is None:
        tune.study_name = Path(tune.out).resolve().name
    return TuneCommand(base, tune, given, parsed.print_config)
