"""EagerAdam: torch's Adam, bitwise, without importing torch._dynamo.

1. the same gradients give bitwise the same parameters and state as ``torch.optim.Adam``
   (fused, and the default kernel), through ``zero_grad`` and a step with a closure;
2. a state_dict from either loads into the other and goes on bitwise alike;
3. step hooks run, and the step records no autograd graph;
4. ``differentiable=True`` is refused;
5. a training run and its resume, in a process of their own, never import ``torch._dynamo``.
"""
from __future__ import annotations

import io
import subprocess
import sys

import pytest
import torch

from conftest import env_for_child
from ppo_lstm.train.eager_adam import EagerAdam


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.LSTM(8, 4))


def _loss(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    out, _ = model[2](model[1](model[0](x)))  # [T, N, 4]
    return (out ** 2).mean()


def _groups(model: torch.nn.Module) -> list[dict]:
    params = list(model.parameters())
    return [{"params": params[:2], "lr": 3e-3, "name": "actor"}, {"params": params[2:], "lr": 1e-2, "name": "critic"}]


def _train(optimizer: torch.optim.Optimizer, model: torch.nn.Module, steps: int, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    for step in range(steps):
        x = torch.randn(6, 3, 5, generator=generator)  # [T, N, obs]
        optimizer.zero_grad()
        if step % 2:
            def closure() -> torch.Tensor:
                loss = _loss(model, x)
                loss.backward()
                return loss
            optimizer.step(closure)
        else:
            _loss(model, x).backward()
            optimizer.step()


def _same(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(torch.equal(p, q) for p, q in zip(a.state_dict().values(), b.state_dict().values()))


def _same_state(a: dict, b: dict) -> bool:
    return a["param_groups"] == b["param_groups"] and a["state"].keys() == b["state"].keys() and all(
        torch.equal(a["state"][i][k], b["state"][i][k]) for i in a["state"] for k in a["state"][i])


def _saved_and_loaded(state: dict) -> dict:
    """``state`` through torch.save and torch.load, as a checkpoint carries it (a copy: loading
    a live state_dict would share its tensors)."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


@pytest.mark.parametrize("kernel", [{"fused": True}, {}], ids=["fused", "default"])
def test_steps_are_bitwise_torchs(kernel):
    ours, theirs = _model(), _model()
    eager = EagerAdam(_groups(ours), eps=1e-5, **kernel)
    adam = torch.optim.Adam(_groups(theirs), eps=1e-5, **kernel)
    _train(eager, ours, 7, seed=1)
    _train(adam, theirs, 7, seed=1)
    assert _same(ours, theirs) and _same_state(eager.state_dict(), adam.state_dict())
    assert not _same(ours, _model())  # the steps moved the weights


def test_a_state_dict_crosses_both_ways_and_goes_on_alike():
    source = _model()
    eager = EagerAdam(_groups(source), eps=1e-5, fused=True)
    _train(eager, source, 3, seed=2)
    into_torch, into_eager = _model(), _model()
    into_torch.load_state_dict(source.state_dict())
    into_eager.load_state_dict(source.state_dict())
    adam = torch.optim.Adam(_groups(into_torch), eps=1e-5, fused=True)
    adam.load_state_dict(_saved_and_loaded(eager.state_dict()))
    again = EagerAdam(_groups(into_eager), eps=1e-5, fused=True)
    again.load_state_dict(_saved_and_loaded(adam.state_dict()))
    _train(adam, into_torch, 3, seed=3)
    _train(again, into_eager, 3, seed=3)
    assert _same(into_torch, into_eager) and _same_state(adam.state_dict(), again.state_dict())


def test_hooks_run_and_the_step_records_no_graph():
    model = _model()
    optimizer = EagerAdam(model.parameters(), lr=1e-2)
    calls = []
    optimizer.register_step_pre_hook(lambda *_: calls.append("pre"))
    optimizer.register_step_post_hook(lambda *_: calls.append("post"))
    _loss(model, torch.ones(2, 1, 5)).backward()
    optimizer.step()
    assert calls == ["pre", "post"]
    assert all(p.grad_fn is None and p.requires_grad for p in model.parameters())
    assert [s["step"].grad_fn for s in optimizer.state.values()] == [None] * len(optimizer.state)


def test_differentiable_is_refused():
    with pytest.raises(ValueError, match="differentiable"):
        EagerAdam(_model().parameters(), differentiable=True)


@pytest.mark.e2e
def test_a_training_run_and_its_resume_never_import_torch_dynamo(tmp_path):
    script = """
import sys
from ppo_lstm.cli import main
tiny = ["--num-envs", "2", "--episode-length", "16", "--window", "8", "--hidden-size", "8", "--lstm-size", "8",
        "--checkpoint-interval", "2", "--no-progress"]
codes = [main(tiny + ["--episodes", "4"]), main(tiny + ["--episodes", "6", "--resume"])]
print(codes, "torch._dynamo" in sys.modules)
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                            cwd=tmp_path, env=env_for_child())
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines()[-1] == "[0, 0] False", result.stdout[-2000:]
    assert "Resumed from checkpoints/checkpoint_u00000002.pt at episode 4/6" in result.stdout


def test_only_one_known_wrapper_is_taken_off_otherwise_torchs_methods_with_a_warning():
    import functools

    from ppo_lstm.train import eager_adam

    assert set(eager_adam._METHODS) == set(eager_adam.METHODS)
    for name, function in eager_adam._METHODS.items():  # this torch's: one known wrapper each, taken off at import
        assert not hasattr(function, "__wrapped__") and function.__name__ == name, name
        assert function.__code__.co_filename.endswith(("torch/optim/adam.py", "torch/optim/optimizer.py")), name

    def plain(self):
        return "plain"

    @functools.wraps(plain)
    def unknown(self):  # a wrapper defined here, not by torch
        return plain(self)

    assert eager_adam.unwrap_guard(plain) is None  # no wrapper
    assert eager_adam.unwrap_guard(unknown) is None  # a wrapper of another kind
    guarded = torch.optim.Optimizer.zero_grad  # torch's guard around a function ...
    assert eager_adam.unwrap_guard(guarded) is guarded.__wrapped__
    twice = functools.wraps(guarded)(lambda self, set_to_none=True: guarded(self, set_to_none))
    twice.__wrapped__ = guarded  # ... wrapped once more: two layers
    assert eager_adam.unwrap_guard(twice) is None

    class Rewrapped(torch.optim.Adam):
        zero_grad = twice

    with pytest.warns(RuntimeWarning, match=r"wraps Rewrapped\.(\w+, )*zero_grad otherwise than EagerAdam knows"):
        methods = eager_adam.resolve_methods(Rewrapped)
    assert all(methods[name] is getattr(Rewrapped, name) for name in eager_adam.METHODS)  # all of torch's own
