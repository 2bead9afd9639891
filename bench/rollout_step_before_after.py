"""The rollout's policy step and GAE of this checkout against those of another, in one process.

Times ``RecurrentActorCritic.step`` (8 envs, the default sizes: the regime market's obs, MLP 64, LSTM 64;
windows of 16 steps, no env starting an episode) and ``compute_gae`` over ``[16, 8]``, the
two versions alternating, one thread; prints the minimum window of each and checks that
the two GAEs are bitwise equal.

    git archive 1b3d99c | tar -x -C /tmp/before && python bench/rollout_step_before_after.py /tmp/before
"""
import sys, time, torch
import argparse, os
parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("before", help="a checkout of the code to compare with (e.g. git archive 1b3d99c | tar -x -C DIR)")
parser.add_argument("--rounds", type=int, default=300)
args = parser.parse_args()
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, args.before)
torch.set_num_threads(1)
import ppo_lstm.algo.agent as old_agent, ppo_lstm.algo.buffer as old_buf
old_step, old_gae = old_agent.RecurrentActorCritic.step, old_buf.compute_gae
for m in list(sys.modules):
    if m.startswith("ppo_lstm"): del sys.modules[m]
sys.path[0] = HERE
import ppo_lstm.algo.agent as new_agent, ppo_lstm.algo.buffer as new_buf
assert new_agent.__file__.startswith(HERE), new_agent.__file__
torch.manual_seed(0)
from envs.config import EnvConfig  # noqa: E402
env = EnvConfig(market="regime")
agent = new_agent.RecurrentActorCritic(env.obs_dim, env.num_actions, 64, 64)
obs, starts = torch.randn(8, env.obs_dim), torch.zeros(8)
state = agent.initial_state(8)
def run_step(fn, kw):
    s = state; tic = time.perf_counter()
    with torch.no_grad():
        for _ in range(16): _, _, s = fn(agent, obs, s, starts, **kw)
    return (time.perf_counter() - tic) / 16
T, N = 16, 8
r, v, st = torch.randn(T, N), torch.randn(T, N), (torch.rand(T, N) < 0.05).float()
nv, ns = torch.randn(N), torch.zeros(N)
def run_gae(fn):
    tic = time.perf_counter(); fn(r, v, st, nv, ns, 0.99, 0.95); return time.perf_counter() - tic
assert torch.equal(old_gae(r, v, st, nv, ns, 0.99, 0.95), new_buf.compute_gae(r, v, st, nv, ns, 0.99, 0.95))
res = {k: [] for k in ("step_before", "step_after", "gae_before", "gae_after")}
for _ in range(args.rounds):
    res["step_before"].append(run_step(old_step, {}))
    res["step_after"].append(run_step(new_agent.RecurrentActorCritic.step, {"any_start": False}))
    res["gae_before"].append(run_gae(old_gae))
    res["gae_after"].append(run_gae(new_buf.compute_gae))
m = {k: min(x) * 1e6 for k, x in res.items()}
for label, key in (("policy step of 8 envs", "step"), ("GAE over [16, 8]", "gae")):
    before, after = m[f"{key}_before"], m[f"{key}_after"]
    print(f"{label}: before {before:.1f} us, after {after:.1f} us ({before / after:.2f}x)")
print("minimum of", args.rounds, "interleaved rounds each; GAE outputs bitwise equal")
