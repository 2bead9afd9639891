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
    job = {"market": "signal-5bps", "episodes": 10, "kind": "ours", "seed": 1, "steps": 1024, "workers": 1,
           "overrides": {"env.feature_window": 1024, "num_envs": 8}, "train_csv": str(train_csv),
           "test_csv": str(test_csv), "additive": True}
    result = run_job({**job, "no_features": True})["result"]  # the featured run with the window: tests/envs
    assert result["env_steps"] >= 1024 and result["bps_per_bar"] == result["bps_per_bar"]  # ran, and scored
