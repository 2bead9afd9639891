"""bench/learning.py's training job: the blind agent beside a --features run (``no_features``) drops
the columns and their window, so an ``env.feature_window`` override applies to the featured runs only."""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.learning_jobs import run_job  # noqa: E402
from bench.learning_markets import EVAL_SEED, write_signal_csv  # noqa: E402


def test_the_blind_agent_trains_beside_a_feature_window_override(tmp_path):
    train_csv, test_csv, _, _ = write_signal_csv(tmp_path, EVAL_SEED)
    lines = test_csv.read_text().splitlines(keepends=True)
    test_csv.write_text("".join(lines[:2001]))  # the header and 2,000 of the 20,000 test bars: a shorter backtest
    job = {"market": "signal-5bps", "episodes": 10, "kind": "ours", "seed": 1, "steps": 1024, "workers": 1,
           "overrides": {"env.feature_window": 1024, "num_envs": 8}, "train_csv": str(train_csv),
           "test_csv": str(test_csv), "additive": True}
    result = run_job({**job, "no_features": True})["result"]  # the featured run with the window: tests/envs
    assert result["env_steps"] >= 1024 and result["bps_per_bar"] == result["bps_per_bar"]  # ran, and scored


def test_the_best_pick_scores_best_pt_which_is_the_final_weights_when_the_end_is_the_only_checkpoint():
    job = {"market": "regime-10bps", "episodes": 10, "kind": "ours", "seed": 1, "steps": 2048, "workers": 1,
           "overrides": {"num_envs": 8, "checkpoint_interval": 10**9}}
    final = run_job({**job, "pick": "final"})["result"]
    best = run_job({**job, "pick": "best"})["result"]  # best.pt, loaded from its file
    assert (final["pick"], best["pick"]) == ("final", "best")
    assert best["bps_per_bar"] == final["bps_per_bar"] and best["turnover"] == final["turnover"]
    assert best["picked_env_steps"] == final["picked_env_steps"] == final["env_steps"]


def test_the_best_pick_keeps_the_hold_outs_choice_over_several_checkpoints():
    job = {"market": "regime-10bps", "episodes": 10, "kind": "ours", "seed": 1, "steps": 4096, "workers": 1,
           "overrides": {"num_envs": 8, "checkpoint_interval": 8, "holdout_episodes": 4}, "pick": "best"}
    result = run_job(job)["result"]  # 4 rounds of 8 episodes: a checkpoint, and a hold-out backtest, after each
    assert result["env_steps"] == 4096 and result["bps_per_bar"] == result["bps_per_bar"]
    assert result["picked_env_steps"] in (1024, 2048, 3072, 4096)


def test_a_failed_launch_of_several_workers_becomes_a_failed_seed_and_the_bench_goes_on(monkeypatch, capsys):
    import bench.learning as learning

    def launch_fails(job):  # what train_ours raises when the launcher returns a non-zero code
        raise RuntimeError(f"training with {job['workers']} workers failed: {job}")

    monkeypatch.setattr(learning, "run_job", launch_fails)
    job = {"market": "regime-10bps", "kind": "ours", "seed": 7, "workers": 4}
    out = learning._run_launched(job)
    assert "result" not in out and out["seed"] == 7 and "training with 4 workers failed" in out["failed"]
    assert "seed 7 with 4 workers failed" in capsys.readouterr().err
