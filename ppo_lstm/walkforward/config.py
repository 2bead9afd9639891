"""The walk-forward command's settings: :class:`WalkForwardConfig`, whose fields are the
walk-forward flags, beside every training flag of :class:`ppo_lstm.config.TrainConfig`.

One parser holds both (the training parser of :func:`ppo_lstm.config.build_parser` and a
``walk-forward`` group built from this dataclass with the same flag builder), so
``--config FILE`` may give either kind of setting.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Optional

from envs.config import EnvConfig

from ..config.command_line import build_parser as build_train_parser
from ..config.schema import TrainConfig
from ..config.flags import ParsedArgs, add_config_group, parse_args
from ..errors import UsageError

WF = "walk-forward: folds, seeds and the verdict"


def _f(default: Any, help: str, **extra: Any) -> Any:
    return field(default=default, metadata={"group": WF, "help": help, **extra})


@dataclass
class WalkForwardConfig:
    """The walk-forward settings. Field ``foo_bar`` is flag ``--foo-bar``."""

    out: Optional[str] = _f(None, "output directory: one run dir per (fold, seed) job under <out>/jobs, and "
                                  "walkforward.csv, oos_returns.csv, summary.json, report.md, report.png",
                            metavar="DIR")
    folds: int = _f(5, "consecutive test windows at the end of the selected data")
    test_size: str = _f("1y", "length of each test window: bars (e.g. 250) or a duration (e.g. 1y, 6mo, 4w, 10d, 12h)",
                        metavar="SIZE")
    scheme: str = _f("anchored", "anchored: every fold trains from the first selected bar; rolling: on the "
                                 "--train-size bars before its test window", choices=("anchored", "rolling"))
    train_size: Optional[str] = _f(None, "with --scheme rolling: bars or a duration each fold trains on (before "
                                         "--purge and its inner --holdout split)", metavar="SIZE")
    purge: int = _f(0, "bars left out between each fold's training bars and its test window")
    seeds: int = _f(3, "training seeds per fold (--seed, --seed + 1, ...); the verdict is about their ensemble")
    configs_tried: int = _f(1, "configurations tried before this one (for the Deflated Sharpe Ratio's trial count: "
                               "seeds x this)")
    study: Optional[str] = _f(None, "the tune-ppo-lstm study this configuration was chosen from (STORAGE:NAME, e.g. "
                                    "runs/tune:tune): its finished trials count as configurations tried, and the "
                                    "spread of their hold-out Sharpe ratios enters the Deflated Sharpe Ratio",
                              metavar="STORAGE:NAME", launch=True)
    tuned_span: Optional[str] = _f(None, "the bars a tuning study read, START..END (tune-ppo-lstm writes it into "
                                         "best.yaml; --study reads it from the study): a test window that overlaps "
                                         "them is refused, as they chose the settings", metavar="START..END",
                                   launch=True)
    jobs: int = _f(1, "(fold, seed) trainings run at once; torch threads are divided among them", launch=True)

    def settings(self) -> dict[str, Any]:
        """The fields that decide the results (not ``out`` or ``jobs``)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name != "out" and not f.metadata.get("launch")}


def build_parser(prog: Optional[str] = None) -> Any:
    """The training parser with the walk-forward group added."""
    parser = build_train_parser(prog)
    parser.description = ("Walk-forward evaluation: train each fold on the bars before its test window with several "
                          "seeds, trade the test windows, and say whether the edge over buy-and-hold is shown.")
    add_config_group(parser, WF, WalkForwardConfig, "wf.")
    return parser


@dataclass(frozen=True)
class WalkForwardCommand:
    """A parsed walk-forward command line: the walk-forward and training settings, the
    training fields given (``"episodes"``, ``"env.fee_bps"``), ``--print-config``."""

    wf: WalkForwardConfig
    train: TrainConfig
    given: frozenset[str]
    print_config: bool


def parse_command_line(argv: Optional[list[str]] = None, prog: Optional[str] = None) -> WalkForwardCommand:
    """Parse ``argv`` (and its ``--config`` file); flag errors exit 2, a bad file raises UsageError."""
    parsed: ParsedArgs = parse_args(build_parser(prog), argv)
    values = vars(parsed.namespace)
    wf = WalkForwardConfig(**{k[3:]: v for k, v in values.items() if k.startswith("wf.")})
    if isinstance(values.get("data"), list) and len(values["data"]) == 1:
        values["data"] = values["data"][0]
    env = EnvConfig(**{k[4:]: v for k, v in values.items() if k.startswith("env.")})
    train = TrainConfig(env=env, **{k: v for k, v in values.items() if not k.startswith(("env.", "wf."))})
    return WalkForwardCommand(wf, train, parsed.given, parsed.print_config)


def validate(wf: WalkForwardConfig, train: TrainConfig) -> None:
    """Raise UsageError (one line) for walk-forward settings that cannot work."""
    if train.data is None:
        raise UsageError("a walk-forward needs --data: one OHLCV file, several, or a directory of them")
    if wf.out is None:
        raise UsageError("pass --out DIR: the walk-forward writes its jobs and reports there")
    for name in ("folds", "seeds", "configs_tried", "jobs"):
        if getattr(wf, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(wf, name)}")
    if wf.purge < 0:
        raise UsageError(f"--purge must be >= 0 bars (0: the test window starts right after training), "
                         f"got {wf.purge}")
    if wf.scheme == "rolling" and wf.train_size is None:
        raise UsageError("--scheme rolling needs --train-size (bars or a duration such as 3y)")
    if wf.scheme == "anchored" and wf.train_size is not None:
        raise UsageError("--train-size sets the training length of --scheme rolling; drop it, or pass --scheme rolling")
    if train.distributed and wf.jobs > 1:
        raise UsageError("--distributed trains one job at a time over every device; drop --jobs or --distributed")
    if train.resume or train.overwrite:
        raise UsageError("--resume and --overwrite are decided per job by the walk-forward; rerun the same command "
                         "to resume, or use another --out")
    if train.time_limit is not None:
        raise UsageError("--time-limit would end each job's training early, and the walk-forward would trade its "
                         "unfinished checkpoint; give fewer --episodes instead")
    if train.train_for is not None:
        raise UsageError("--train-for would size each job's episodes by this machine's speed, so the walk-forward "
                         "would not reproduce; give --episodes instead")
    if train.holdout <= 0:
        raise UsageError("each fold's inner --holdout picks the checkpoint that trades its test window; "
                         "--holdout must be > 0 (e.g. 0.2)")
