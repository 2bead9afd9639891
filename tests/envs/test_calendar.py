"""Bars per year from the bars' own timestamps (envs/data/calendar.py), on each kind of calendar."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from pandas.tseries import holiday

from envs.data.calendar import bars_per_year, basket_bars_per_year

class Exchange(holiday.AbstractHolidayCalendar):
    """The NYSE's nine full-day closures before 2022 (pandas' holiday rules)."""

    rules = [holiday.Holiday("New Year", month=1, day=1, observance=holiday.sunday_to_monday),
             holiday.USMartinLutherKingJr, holiday.USPresidentsDay, holiday.GoodFriday, holiday.USMemorialDay,
             holiday.Holiday("Independence Day", month=7, day=4, observance=holiday.nearest_workday),
             holiday.USLaborDay, holiday.USThanksgivingDay,
             holiday.Holiday("Christmas", month=12, day=25, observance=holiday.nearest_workday)]


def exchange_days(first: str, last: str) -> pd.DatetimeIndex:
    """Business days from ``first`` to ``last`` without the exchange's closures (250 to 252 a year)."""
    days = pd.bdate_range(first, last)
    return days[~days.isin(Exchange().holidays(first, last))]


def nyse_hours(days: pd.DatetimeIndex) -> np.ndarray:
    """Seven hourly bars a day, stamped 09:30 to 15:30."""
    hours = pd.to_timedelta(np.arange(7), "h") + pd.Timedelta("9h30min")
    return (days.values[:, None] + hours.values[None, :]).ravel()


def test_exchange_daily_bars_are_about_252() -> None:
    days = exchange_days("2014-06-01", "2019-06-30")
    counts = pd.Series(days.year).value_counts()
    assert all(250 <= counts[year] <= 252 for year in range(2015, 2019))  # the fixture is an exchange calendar
    assert 250 <= bars_per_year(days.values) <= 253


def test_daily_crypto_is_365_and_24_7_hourly_is_8760() -> None:
    assert bars_per_year(pd.date_range("2015-03-01", "2019-10-31", freq="D").values) == 365.0
    assert bars_per_year(pd.date_range("2015-03-01", "2019-10-31", freq="h").values) == 8760.0


def test_nyse_hourly_bars_are_about_1764_not_8760() -> None:
    stamps = nyse_hours(exchange_days("2015-06-01", "2018-06-30"))
    assert 1750 <= bars_per_year(stamps) <= 1771  # 250 to 253 days x 7


def test_minute_bars() -> None:
    assert bars_per_year(pd.date_range("2017-01-02", periods=50, freq="min").values) == 525600.0
    day = pd.date_range("2017-01-02 09:30", periods=390, freq="min")  # one exchange session a day
    minutes = np.concatenate([(day + pd.Timedelta(days=int(k))).values for k in range(0, 28) if k % 7 < 5])
    assert bars_per_year(minutes) == pytest.approx(390 * 5 * 365 / 7, abs=1)


@pytest.mark.parametrize("first,last", [("2017-01-03", "2017-12-29"), ("2017-03-06", "2018-05-04"),
                                        ("2016-11-01", "2017-02-10")])
def test_a_file_without_a_full_calendar_year_counts_its_whole_weeks(first: str, last: str) -> None:
    # a year, 14 months or 3 months of exchange days: about 252, not 260 from a weekend missing at the end
    # (the 3 months hold four closures in 14 weeks, a few more than a year's share: 246)
    days = exchange_days(first, last)
    assert 245 <= bars_per_year(days.values) <= 256
    assert bars_per_year(pd.bdate_range(first, last).values) == pytest.approx(5 * 365 / 7, abs=2)


def test_nyse_hourly_over_three_months() -> None:
    assert 1730 <= bars_per_year(nyse_hours(exchange_days("2017-03-01", "2017-05-31"))) <= 1800


def test_under_a_week_and_under_two_bars() -> None:
    assert bars_per_year(pd.date_range("2017-01-02", periods=3, freq="D").values) == 365.0
    assert math.isnan(bars_per_year(np.array(["2017-01-02"], dtype="datetime64[ns]")))
    assert math.isnan(bars_per_year(np.array([], dtype="datetime64[ns]")))
    assert math.isnan(basket_bars_per_year([]))


def test_order_and_repeats_do_not_matter() -> None:
    days = exchange_days("2015-06-01", "2018-06-30").values
    assert bars_per_year(np.concatenate([days[::-1], days[:10]])) == bars_per_year(days)


def test_a_basket_counts_the_union_of_its_instruments_stamps() -> None:
    days = exchange_days("2015-06-01", "2018-06-30")
    every_day = pd.date_range("2015-06-01", "2018-06-30", freq="D")
    assert basket_bars_per_year([days.values, days.values[100:]]) == bars_per_year(days.values)
    assert basket_bars_per_year([days.values, every_day.values]) == 365.0  # a bar on every day of the basket
    hourly = nyse_hours(days)
    assert basket_bars_per_year([days.values + np.timedelta64(16, "h"), hourly]) == pytest.approx(8 * 252, abs=16)
