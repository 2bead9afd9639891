"""bench/market_family.py's family: drawn reproducibly from its seed, within its ranges, split
the same way every time, and written as the files the bench trains on (no learning judged)."""
import math
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.family_draw import (CHUNK, CHUNKS, EDGE_OVER_COST, FAMILY_SEED, KINDS, RANGES, TEST_BARS,  # noqa: E402
                               TEST_WARMUP, TRAIN_BARS, VARIANTS_PER_KIND, characteristic_move, chunk_bounds,
                               draw_family, draw_variant, pick, write_variant)
from bench.market_family import distribution, paired, parse_flag_sets  # noqa: E402


def test_the_family_is_the_same_from_the_same_seed_and_another_from_another():
    first, again = draw_family(), draw_family()
    assert [v.to_dict() for v in first] == [v.to_dict() for v in again]
    other = draw_family(FAMILY_SEED + 1)
    assert [v.params for v in other] != [v.params for v in first]
    # a variant depends on (seed, kind, index) alone: a smaller family is the larger one's start
    assert [v.to_dict() for v in draw_family(per_kind=3)] == [v.to_dict() for v in first if v.index < 3]


def test_every_parameter_lies_within_its_range_and_every_variant_can_pay_its_costs():
    for v in draw_family():
        assert set(v.params) == set(RANGES[v.kind])
        for name, (low, high, _) in {**RANGES[v.kind], **RANGES["all"]}.items():
            value = v.fee_bps if name == "fee_bps" else v.params[name]
            assert low <= value <= high, (v.name, name, value)
        assert characteristic_move(v.kind, v.process_params()) >= EDGE_OVER_COST * v.fee_bps / 1e4
    p = draw_variant("signal", 0).process_params()
    assert 0.0 < p["phi"] < 1.0 and p["edge"] > 0.0


def test_the_split_is_fixed_a_quarter_held_out_in_every_kind():
    family = draw_family()
    held = [v.name for v in family if v.held_out]
    assert held == [f"{kind}-{i:02d}" for kind in KINDS for i in (3, 7, 11, 15)]
    assert all(v.split == ("held-out" if v.held_out else "tuning") for v in family)
    tuning = pick(family, "tuning", 4)
    assert [v.name for v in tuning if v.kind == "ou"] == ["ou-00", "ou-01", "ou-02", "ou-04"]
    assert not any(v.held_out for v in tuning)
    assert all(v.held_out for v in pick(family, "held-out", VARIANTS_PER_KIND))


def test_a_signal_variant_is_written_with_its_signal_and_noise_columns(tmp_path):
    v = draw_variant("signal", 1)
    train, test = write_variant(v, tmp_path)
    head = pd.read_csv(train, nrows=5)
    assert list(head.columns) == ["Date", "Open", "High", "Low", "Close", "Volume", "signal", "noise"]
    assert sum(1 for _ in open(train)) - 1 == TRAIN_BARS and sum(1 for _ in open(test)) - 1 == TEST_BARS
    assert v.flags()[-2:] == ["--features", "signal,noise"]


def test_the_scored_episodes_tile_the_test_file_after_its_warm_up():
    bounds = chunk_bounds()
    assert len(bounds) == CHUNKS and bounds[0][0] == TEST_WARMUP and bounds[-1][1] == TEST_BARS
    assert all(end - start - 1 == CHUNK for start, end in bounds)
    assert all(b[0] == a[0] + CHUNK for a, b in zip(bounds, bounds[1:]))


def test_flag_sets_and_the_distribution():
    assert parse_flag_sets([]) == {"defaults": []}
    assert parse_flag_sets(['defaults=', 'fw256=--feature-window 256']) == {
        "defaults": [], "fw256": ["--feature-window", "256"]}
    with pytest.raises(ValueError):
        parse_flag_sets(["--feature-window 256"])
    d = distribution([float(x) for x in range(1, 11)])
    assert d["median"] == 5.5 and math.isclose(d["worst_decile"], 1.9) and d["worst"] == 1.0


def test_paired_compares_each_flag_set_with_the_first_run_by_run():
    def runs(*shares):
        return [{"seed": seed, "share": share} for seed, share in enumerate(shares, 1)]
    variants = [{"kind": "ou", "runs": {"a": runs(0.5, 0.6), "b": runs(0.6, 0.59), "c": runs(0.1, 0.2)}},
                {"kind": "signal", "runs": {"a": runs(0.1, 0.2), "b": runs(0.0, 0.3) + [{"seed": 3, "share": 9.0}],
                                            "c": [{"seed": 1, "failed": "exit 1"}, {"seed": 2, "share": 0.2}]}}]
    out = paired(variants, {"a": [], "b": ["--x"], "c": ["--y"]})
    assert list(out) == ["b", "c"]  # the first is the yardstick; seed 3 has no partner
    assert out["b"]["ou"] == {"runs": 2, "median_diff": pytest.approx(0.045), "better": 1, "worse": 0}
    assert out["b"]["signal"] == {"runs": 2, "median_diff": pytest.approx(0.0), "better": 1, "worse": 1}
    assert out["b"]["all"]["runs"] == 4 and (out["b"]["all"]["better"], out["b"]["all"]["worse"]) == (2, 1)
    assert out["c"]["signal"] == {"runs": 1, "median_diff": pytest.approx(0.0), "better": 0, "worse": 0}
    assert out["c"]["ou"]["worse"] == 2


def test_variants_by_name_keep_the_family_order_and_refuse_a_held_out_name_in_the_tuning_split():
    from bench.market_family import pick_named
    family = draw_family()
    assert [v.name for v in pick_named(family, "signal-04, signal-02", "tuning")] == ["signal-02", "signal-04"]
    with pytest.raises(ValueError, match="held-out"):
        pick_named(family, "signal-02,signal-03", "tuning")
    assert [v.name for v in pick_named(family, "signal-03", "held-out")] == ["signal-03"]
    with pytest.raises(ValueError, match="unknown"):
        pick_named(family, "signal-99", "all")


def test_a_flag_sets_budget_comes_after_the_benchs_and_wins():
    from bench.family_jobs import _parse
    config = _parse(["--data", "x.csv", "--train-for", "30s", "--train-for", "60s"])
    assert "60" in str(config.train_for) and "30" not in str(config.train_for)


def test_position_against_the_column():
    import numpy as np
    from bench.family_jobs import position_vs_column
    column = np.array([1.0, -2.0, 0.5, -0.1])
    follows = position_vs_column(np.sign(column), column)
    assert follows["exposure"] == 1.0 and follows["sign_agree"] == 1.0 and follows["corr"] > 0.7
    flat = position_vs_column(np.zeros(4), column)
    assert flat["exposure"] == 0.0 and flat["corr"] == 0.0 and math.isnan(flat["sign_agree"])
    against = position_vs_column(np.array([-1.0, 1.0, 0.0, 0.0]), column)
    assert against["exposure"] == 0.5 and against["sign_agree"] == 0.0 and against["corr"] < 0


def test_a_job_picking_best_scores_best_pt_with_the_final_weights_beside_it(tmp_path):
    """One tiny training run on a variant's files, scored at both picks (no learning judged)."""
    from bench.family_jobs import train_family
    from tests.conftest import TINY

    train, test = write_variant(draw_variant("regime", 0), tmp_path)
    job = {"argv": [*TINY, "--episodes", "8", "--checkpoint-interval", "4", "--holdout", "0.01"], "seed": 1,
           "train_csv": str(train), "test_csv": str(test)}
    final = train_family(job)
    best = train_family({**job, "pick": "best"})
    assert "final" not in final and math.isfinite(final["bps_per_bar"])
    assert best["final"] == {k: final[k] for k in best["final"]}  # the checkpoints leave the training as it was
    assert 0 < best["picked_env_steps"] <= best["env_steps"] == final["env_steps"]


def test_the_benchs_train_fee_multiplier_raises_the_training_fee_and_leaves_the_scoring_fee():
    from bench.family_jobs import split_train_fee
    argv = ["--fee-bps", "5", "--slippage-bps", "0", "--train-fee-mult", "2", "--episodes", "8"]
    assert split_train_fee(argv) == (["--fee-bps", "10", "--slippage-bps", "0", "--episodes", "8"], 5.0)
    assert split_train_fee(["--fee-bps", "5"]) == (["--fee-bps", "5"], None)
    # a flag set's own --fee-bps comes after the market's and wins: that is the one multiplied
    assert split_train_fee(["--fee-bps", "5", "--fee-bps", "3", "--train-fee-mult", "4"]) == (
        ["--fee-bps", "5", "--fee-bps", "12"], 3.0)
    for bad in (["--fee-bps", "5", "--train-fee-mult", "0"],
                ["--fee-bps", "5", "--train-fee-mult", "2", "--train-fee-mult", "2"]):
        with pytest.raises(ValueError):
            split_train_fee(bad)


def test_a_job_trained_at_a_multiple_of_the_fee_is_scored_at_the_fee(tmp_path, monkeypatch):
    """One tiny run: the trainer reads the raised fee, the test file is scored at the variant's."""
    import bench.family_jobs as jobs
    from tests.conftest import TINY

    seen = []
    score = jobs.score_episodes
    monkeypatch.setattr(jobs, "score_episodes",
                        lambda agent, env, *rest: seen.append(env.fee_bps) or score(agent, env, *rest))
    train, test = write_variant(draw_variant("regime", 0), tmp_path)
    job = {"argv": [*TINY, "--fee-bps", "5", "--train-fee-mult", "3", "--episodes", "4"], "seed": 1,
           "train_csv": str(train), "test_csv": str(test)}
    parsed = []
    parse = jobs._parse
    monkeypatch.setattr(jobs, "_parse", lambda argv: parsed.append(parse(argv)) or parsed[-1])
    out = jobs.train_family(job)
    assert parsed[0].env.fee_bps == 15.0 and seen == [5.0] and math.isfinite(out["bps_per_bar"])


def test_extra_test_files_are_fresh_paths_of_the_same_law_and_leave_the_first_two_files_as_they_were(tmp_path):
    from bench.family_draw import write_extra_tests
    v = draw_variant("signal", 2)
    for sub in ("one", "two", "three"):
        (tmp_path / sub).mkdir()
    train, test = write_variant(v, tmp_path / "one")
    again = write_variant(v, tmp_path / "two")
    extra = write_extra_tests(v, tmp_path / "two", 2)
    assert [p.read_bytes() for p in (train, test)] == [p.read_bytes() for p in again]
    frames = [pd.read_csv(p) for p in (test, *extra)]
    assert [len(f) for f in frames] == [TEST_BARS] * 3 and list(frames[1].columns) == list(frames[0].columns)
    assert not frames[1]["signal"].equals(frames[2]["signal"]) and not frames[1]["signal"].equals(frames[0]["signal"])
    assert write_extra_tests(v, tmp_path / "three", 1)[0].read_bytes() == extra[0].read_bytes()  # from its seed alone


@pytest.fixture(scope="module")
def two_test_files(tmp_path_factory):
    """regime-00's files with one extra test file, and its ceiling over both test files."""
    from bench.family_ceiling import ceiling
    from bench.family_draw import write_extra_tests
    from envs.data import load_ohlcv
    tmp = tmp_path_factory.mktemp("two_test_files")
    v = draw_variant("regime", 0)
    train, test = write_variant(v, tmp)
    extra = write_extra_tests(v, tmp, 1)[0]
    return v, train, test, extra, ceiling(v, load_ohlcv(train), load_ohlcv(test), [load_ohlcv(extra)])


def test_the_ceiling_over_several_test_files_is_the_mean_of_their_episodes(two_test_files):
    import numpy as np
    from bench.family_ceiling import model_expected, rule_env, score_bands
    from envs.data import load_ohlcv
    v, _, test, extra, rule = two_test_files
    assert len(rule["episode_bps"]) == 2 * CHUNKS
    assert math.isclose(rule["bps_per_bar"], float(np.mean(rule["episode_bps"])))
    for part, path in zip((rule["episode_bps"][:CHUNKS], rule["episode_bps"][CHUNKS:]), (test, extra)):
        data = load_ohlcv(path)  # each file's episodes, in order, at the band tuned on the training file
        alone = score_bands(rule_env(v), data, model_expected(v, data), [rule["threshold_bps"]], chunk_bounds())
        np.testing.assert_array_equal(part, alone["episodes"][0])


def test_a_job_scored_on_several_files_reports_its_noise_against_the_ceiling(two_test_files):
    """A tiny run scored on two test files beside the ceiling's per-episode scores (no learning judged)."""
    from bench.family_jobs import train_family
    from tests.conftest import TINY
    v, train, test, extra, rule = two_test_files
    job = {"argv": [*TINY, *v.flags(), "--episodes", "4"], "seed": 1, "train_csv": str(train),
           "test_csv": str(test), "test_csvs": [str(test), str(extra)], "rule_bps": rule["episode_bps"]}
    out = train_family(job)
    assert out["episodes_scored"] == 2 * CHUNKS and out["diff_se_bps"] > 0 and math.isfinite(out["bps_per_bar"])
    alone = train_family({k: x for k, x in job.items() if k not in ("test_csvs", "rule_bps")})
    assert alone["episodes_scored"] == CHUNKS and "diff_se_bps" not in alone


def test_the_paired_standard_error_is_scipys_standard_error_of_the_differences():
    import numpy as np
    from scipy.stats import sem
    from bench.family_jobs import paired_se
    rng = np.random.default_rng(5)
    a, b = rng.normal(1.0, 2.0, 300), rng.normal(0.5, 1.0, 300)
    assert math.isclose(paired_se(a, b), float(sem(a - b)), rel_tol=1e-12)
    assert math.isclose(paired_se(a, a + 1.0), 0.0, abs_tol=1e-12)  # a constant difference has no noise
