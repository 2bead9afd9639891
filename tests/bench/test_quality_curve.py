"""Steps and seconds to reach a score, from learning curves (bench/quality_curve.py)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.quality_curve import best_score, first_reach, reach_summary  # noqa: E402

# (env_steps, wall_s, score)
FAST = [(0, 0.0, -5.0), (8192, 1.0, 2.0), (16384, 2.0, 5.0), (24576, 3.0, 4.0)]
SLOW = [(0, 0.0, -5.0), (8192, 4.0, 1.0), (16384, 8.0, 3.0), (24576, 12.0, 5.5)]
NEVER = [(0, 0.0, -5.0), (8192, 3.0, 0.5), (16384, 6.0, 1.0)]


def test_first_reach_is_the_first_point_at_or_above_the_target():
    assert first_reach(FAST, 2.0) == (8192, 1.0, 2.0)  # equal counts as reached
    assert first_reach(FAST, 4.5) == (16384, 2.0, 5.0)  # later dips do not matter
    assert first_reach(NEVER, 2.0) is None


def test_median_and_worst_over_seeds():
    r = reach_summary([FAST, SLOW, NEVER], 0.8)
    assert r["reached"] == 3 and r["runs"] == 3
    assert (r["steps_median"], r["wall_median"]) == (8192, 4.0)  # 1.0, 4.0, 6.0 s
    assert (r["steps_worst"], r["wall_worst"]) == (16384, 6.0)


def test_a_seed_that_never_reaches_it_makes_the_worst_not_reached():
    r = reach_summary([FAST, SLOW, NEVER], 3.0)
    assert r["reached"] == 2
    assert (r["steps_median"], r["wall_median"]) == (16384, 8.0)
    assert r["steps_worst"] is None and r["wall_worst"] is None
    r = reach_summary([FAST, NEVER, NEVER], 3.0)
    assert r["steps_median"] is None and r["wall_median"] is None  # most seeds never get there
    r = reach_summary([FAST, NEVER], 3.0)
    assert r["wall_median"] is None  # of two, the slower one is the median


def test_best_score_is_the_median_of_each_seeds_best():
    assert best_score([FAST, SLOW, NEVER]) == 5.0  # bests 5.0, 5.5, 1.0
