"""bench/gpu_learning.py's curve and summary on the CPU, and bench/plot_batch_curves.py reading them."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.gpu_learning import curve, summary  # noqa: E402


def test_a_curve_is_scored_at_the_start_every_k_updates_and_at_the_end():
    run = curve("regime-10bps", num_envs=8, seed=1, updates=8, every=4, episodes=10, device="cpu", cap=None)
    steps = [p[0] for p in run["curve"]]
    assert steps == [0, 512, 1024]  # 8 envs x 16 steps = 128 an update; 8 updates = one 128-bar episode each
    # the rule at batch 128 (8 envs): 2 minibatches of 64, x sqrt(64 / 32)
    assert run["batch"] == 128 and run["rates"] == pytest.approx([3e-4 * 2 ** 0.5, 1e-3 * 2 ** 0.5])
    walls = [p[1] for p in run["curve"]]
    assert walls == sorted(walls) and run["train_s"] >= walls[-1]
    capped = curve("regime-10bps", num_envs=8, seed=1, updates=8, every=8, episodes=10, device="cpu", cap=0.5)
    assert capped["rates"] == pytest.approx([1.5e-4, 5e-4])  # min(sqrt(2), 0.5), given explicitly
    assert run["obs_dim"] == 32 + 3 + 1  # + the default EMA(500) deviation
    plain = curve("ou-10bps", num_envs=8, seed=1, updates=8, every=8, episodes=10, device="cpu", cap=None,
                  env_fields={"ema_spans": "none"})  # as --env ema_spans=none gives it
    assert plain["obs_dim"] == 32 + 3 and plain["market"] == "ou-10bps"
    ref = 2.0
    s = summary([run], ref)
    assert s["final_mean"] == pytest.approx(run["curve"][-1][2] / ref) and set(s["reach"]) == {"50", "80", "90"}


@pytest.mark.e2e
def test_the_plot_reads_every_gpu_learning_line(tmp_path):
    pytest.importorskip("matplotlib")
    curves = {"8 envs, batch 128": [[[0, 0.0, -1.0], [128, 0.5, 1.0], [256, 1.0, 2.0]]]}
    line = {"bench": "gpu_learning", "device": "cpu", "markets": {"regime-10bps": {"reference_bps": 2.0,
                                                                                    "curves": curves}}}
    results = tmp_path / "r.txt"
    results.write_text("# a header\n" + json.dumps(line) + "\n")
    out = tmp_path / "c.png"
    script = ROOT / "bench" / "plot_batch_curves.py"
    done = subprocess.run([sys.executable, str(script), str(results), "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "CPU: 8 envs, batch 128: 1 seeds" in done.stdout and out.stat().st_size > 0
