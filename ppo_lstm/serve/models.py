"""The server's request and response bodies, as pydantic models (they validate, and make the OpenAPI page).

A bar is its time and OHLCV (prices finite and > 0, high >= low and bracketing open and close, as
the data loader requires of a file's rows), with its raw feature values by name for a policy
trained with ``--features``. A decision answer names the bar it was taken after (the decision is
for the next bar, traded at its open), the decision, the paper account, whether the bar was a
duplicate of the last one, and a gap wider than the history's widest.
"""
from __future__ import annotations

from typing import Annotated, Optional

from pydantic import BaseModel, ConfigDict, Field, model_validator

Price = Annotated[float, Field(gt=0, allow_inf_nan=False, description="finite and > 0")]
Volume = Annotated[float, Field(ge=0, allow_inf_nan=False, description="finite and >= 0")]
_TOLERANCE = 1e-9  # the loader's: high and low may miss open or close by this fraction of high


class Bar(BaseModel):
    """One closed bar."""

    model_config = ConfigDict(extra="forbid")
    time: str = Field(description="the bar's time, ISO 8601 (e.g. 2024-01-02 or 2024-01-02T14:30:00Z); a time "
                                  "zone is converted to UTC")
    open: Price
    high: Price
    low: Price
    close: Price
    volume: Volume = 0.0
    features: Optional[dict[str, Optional[float]]] = Field(
        default=None, description="with a policy trained with --features: each feature column's raw value by name "
                                  "(case-insensitive); null while a column has had no value yet")

    @model_validator(mode="after")
    def _brackets(self) -> "Bar":
        tol = _TOLERANCE * self.high
        if self.high < self.low:
            raise ValueError(f"high {self.high:g} is below low {self.low:g}")
        if self.high + tol < max(self.open, self.close):
            raise ValueError(f"high {self.high:g} is below open {self.open:g} or close {self.close:g}")
        if self.low - tol > min(self.open, self.close):
            raise ValueError(f"low {self.low:g} is above open {self.open:g} or close {self.close:g}")
        return self


class OpenSession(BaseModel):
    """A new session's history: its bars in time order, and where decisions start."""

    model_config = ConfigDict(extra="forbid")
    bars: list[Bar] = Field(min_length=1, description="past bars, oldest first; checked as a data file is")
    start: Optional[str] = Field(default=None, description="the first decision is at the first bar at or after "
                                                           "this date, as predict-ppo-lstm --start (default: the "
                                                           "first bar that can be decided)")


class Fill(BaseModel):
    """The real fill of the pending decision, at the next bar's open."""

    model_config = ConfigDict(extra="forbid")
    price: Price = Field(description="the price paid, slippage included (none is added; the fee is charged)")
    lots: int = Field(description="signed lots held after the fill: one of the policy's positions")


class BarRef(BaseModel):
    """A bar of the stream."""

    time: str = Field(description="its time (naive UTC, ISO 8601)")
    index: int = Field(description="its index in the stream: 0 is the first bar the session consumed")


class DecisionOut(BaseModel):
    """The decision taken after a bar closed: what to hold during the next bar."""

    target_position: int = Field(description="signed lots to hold during the next bar, traded at its open")
    position: int = Field(description="signed lots held now, during the bar the decision was taken after")
    trade: int = Field(description="target_position - position: lots to buy (> 0) or sell (< 0) at the next open")
    probabilities: dict[str, float] = Field(description="the probability of each action, by its signed lots")
    logits: list[float]
    value: float = Field(description="the critic's estimate (reward units)")


class AccountOut(BaseModel):
    """The paper account the policy's observation reads (fills at the next open, as the backtest)."""

    equity: float = Field(description="equity at the close of the bar")
    position: int
    bust: bool = Field(description="equity reached 0: every later decision is flat")
    opened_at: Optional[str] = Field(description="the first decision bar: the account opened flat at its close")
    pending_fill: Optional[Fill] = Field(description="a reported fill, booked at the next bar's open")


class Gap(BaseModel):
    """A bar that came later after the previous one than any bar of the session's history did."""

    seconds: float = Field(description="time since the previous bar")
    allowed_seconds: float = Field(description="the widest gap between two bars of the history")
    message: str


class DecisionAnswer(BaseModel):
    """The answer to a bar: the decision for the next bar."""

    session: str
    bar: BarRef = Field(description="the bar the decision was taken after (the decision is for the next bar)")
    decision: DecisionOut
    account: AccountOut
    duplicate: bool = Field(description="the bar was the session's last one again: nothing was consumed, and this "
                                        "is the answer it had")
    gap: Optional[Gap] = Field(description="set when the bar came after a gap wider than the history allows")


class SessionOut(BaseModel):
    """A session: its policy, its bars and its last answer."""

    session: str
    route: str = Field(description="checkpoint or onnx")
    fingerprint: str = Field(description="the policy's fingerprint (SHA-256 of its weights and settings)")
    bars: int = Field(description="bars consumed")
    start: Optional[str] = Field(description="the --start the session was opened with")
    features: list[str] = Field(description="the feature columns each bar carries")
    allowed_gap_seconds: Optional[float] = Field(description="the widest gap between two bars of the history")
    warm_up_warning: Optional[str] = Field(None, description="set when the history was too short for the policy's "
                                                             "EMAs to read as a backtest on the whole file does")
    last: DecisionAnswer


class SessionList(BaseModel):
    """The open sessions, by name."""

    sessions: list[str]


class Closed(BaseModel):
    """A closed session: its state file is removed."""

    session: str
    bars: int


class Health(BaseModel):
    """The server is up."""

    status: str
    route: str
    fingerprint: str
    sessions: int
    fsync: bool


class ErrorOut(BaseModel):
    """Every 4xx and 5xx answer: what is wrong, in one line."""

    error: str
    errors: Optional[list[dict[str, object]]] = Field(default=None, description="a body that does not validate: "
                                                                                 "each problem and where it is")
