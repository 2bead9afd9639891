"""Environment options: the single source of truth for every env flag.

The trainer's config (``ppo_lstm.config.TrainConfig``) nests this dataclass, and
the command-line flags are generated from these fields, their defaults and the
``help`` text in each field's metadata.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Optional, Union

from envs.data.features import (FEATURE_WINDOW, MAX_FEATURE_WINDOW, MIN_FEATURE_WINDOW, SAVED_FEATURE_WINDOW,
                                canonical_feature_window, parse_feature_names, parse_feature_windows)
from envs.ema_deviation import DEFAULT_EMA_SPANS, NO_SPANS, parse_ema_spans

MARKETS: tuple[str, ...] = ("gbm", "ou", "regime", "jump", "garch", "mixed")
__all__ = ["EnvConfig", "MARKETS", "MAX_FEATURE_WINDOW", "MIN_FEATURE_WINDOW", "make_config"]


@dataclass
class EnvConfig:
    """Options of one trading environment (shared by the single and vector envs)."""

    market: str = field(
        default="mixed",
        metadata={"help": "simulated market when no --data is used", "choices": MARKETS},
    )
    window: int = field(default=32, metadata={"help": "bars of normalised log returns in each observation"})
    episode_length: int = field(default=128, metadata={"help": "decisions (bars) per episode"})
    max_position: int = field(default=1, metadata={"help": "largest position K in lots; actions are -K..+K"})
    no_short: bool = field(default=False, metadata={"help": "allow only long or flat positions (0..K); --short: "
                                                         "short ones too (-K..K)"})
    fee_bps: float = field(default=1.0, metadata={"help": "proportional fee per traded notional, basis points"})
    slippage_bps: float = field(default=1.0, metadata={"help": "adverse fill slippage, basis points"})
    initial_cash: float = field(default=10_000.0, metadata={"help": "starting equity in dollars"})
    reward_scale: float = field(
        default=100.0, metadata={"help": "reward = change in equity / initial cash * this (100: percent)"}
    )
    features: Optional[str] = field(
        default=None,
        metadata={"help": "COL[,COL...]: numeric columns of --data (any case) added to the observation, each as a "
                          "causal rolling z-score, clipped (docs/data.md); leading NaN rows (a warm-up) are allowed"},
    )

    feature_window: Union[str, int] = field(  # text on the command line; saved as an int for one window
        default=FEATURE_WINDOW,
        metadata={"help": "N[,N...]: bars of each --features column's rolling mean and std (its z-score); longer "
                          "keeps more of a slow column's level, shorter adapts sooner to a change in its scale; "
                          "several windows, in increasing order, give each column one z-score per window "
                          "(docs/data.md)"},
    )

    ema_spans: Optional[str] = field(
        default=DEFAULT_EMA_SPANS,
        metadata={"help": "N[,N...]: add, per span N (bars), the log close's deviation from its EMA(N) as a "
                          "z-score: memory beyond --window for mean reversion or slow trends; none: no such "
                          "entries (docs/environments.md)", "null_value": "none"},  # a config file's null
    )

    def __post_init__(self) -> None:
        if self.ema_spans is not None and str(self.ema_spans).strip().lower() in NO_SPANS:
            self.ema_spans = None  # --ema-spans none, "" and None are one setting: saved, compared and shown as none

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "feature_window":  # however set: "512" and 512 are one setting (the int), "256, 1024" "256,1024"
            value = canonical_feature_window(value)
        super().__setattr__(name, value)

    @property
    def num_actions(self) -> int:
        """Size of the discrete action space: 2K+1 with shorting, K+1 without."""
        return self.max_position + 1 if self.no_short else 2 * self.max_position + 1

    @property
    def feature_names(self) -> tuple[str, ...]:
        """The ``--features`` columns, in order (``()`` without features)."""
        return parse_feature_names(self.features)

    @property
    def feature_windows(self) -> tuple[int, ...]:
        """The ``--feature-window`` windows, in increasing order (one by default)."""
        return parse_feature_windows(self.feature_window)

    @property
    def num_feature_entries(self) -> int:
        """Observation entries of the ``--features`` columns: one per column and window."""
        return len(self.feature_names) * len(self.feature_windows)

    @property
    def spans(self) -> tuple[int, ...]:
        """The ``--ema-spans``, in order (``()`` without them)."""
        return parse_ema_spans(self.ema_spans)

    @property
    def obs_dim(self) -> int:
        """Observation length: window returns + position, unrealised PnL, time in position + features
        (columns x windows) + EMA deviations."""
        return self.window + 3 + self.num_feature_entries + len(self.spans)

    def validate(self) -> None:
        """Raise ValueError with a one-line, fix-it message for an impossible setting."""
        if self.market not in MARKETS:
            raise ValueError(f"--market {self.market!r} is unknown; choose one of {', '.join(MARKETS)}")
        for name in ("window", "episode_length", "max_position"):
            value = getattr(self, name)
            if value < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be at least 1, got {value}")
        for name in ("fee_bps", "slippage_bps"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"--{name.replace('_', '-')} must be a finite number >= 0, got {value}")
        for name in ("initial_cash", "reward_scale"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"--{name.replace('_', '-')} must be a finite number > 0, got {value}")
        parse_feature_names(self.features)
        windows = parse_feature_windows(self.feature_window)
        if windows not in ((FEATURE_WINDOW,), (SAVED_FEATURE_WINDOW,)) and not self.feature_names:
            # (256, the default before 1,024, is what older versions' saved config files name)
            raise ValueError(f"--feature-window {self.feature_window} sets the z-score window of --features columns, "
                             f"and none are named; pass --features too, or drop --feature-window")
        parse_ema_spans(self.ema_spans)


def make_config(config: EnvConfig | None, overrides: dict[str, Any]) -> EnvConfig:
    """``config`` (default EnvConfig()) with ``overrides`` applied, validated."""
    config = replace(config if config is not None else EnvConfig(), **overrides)
    config.validate()
    return config
