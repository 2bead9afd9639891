"""Adam for a trainer that runs eagerly: torch's own Adam, without the import of ``torch._dynamo``.

``torch.optim.Optimizer`` wraps ``step``, ``zero_grad``, ``add_param_group``, ``state_dict``
and ``load_state_dict`` so that ``torch.compile`` leaves them alone, and each wrapper imports
``torch._dynamo`` on its first call: 3.2 s of CPU in every process that trains, where a tiny
run takes 5.0 s without it (bench/results/startup.txt). Nothing here is compiled, so
:class:`EagerAdam` calls the functions those wrappers wrap, found with :func:`inspect.unwrap`.
The arithmetic, the fused kernel, the state, ``state_dict`` and the step hooks are torch's: its
updates and checkpoints are bitwise those of ``torch.optim.Adam`` (``tests/train/test_eager_adam.py``).
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, Optional

import torch

_STEP = inspect.unwrap(torch.optim.Adam.step)
_ZERO_GRAD = inspect.unwrap(torch.optim.Optimizer.zero_grad)
_ADD_PARAM_GROUP = inspect.unwrap(torch.optim.Optimizer.add_param_group)
_STATE_DICT = inspect.unwrap(torch.optim.Optimizer.state_dict)
_LOAD_STATE_DICT = inspect.unwrap(torch.optim.Optimizer.load_state_dict)


class EagerAdam(torch.optim.Adam):
    """``torch.optim.Adam`` whose methods skip torch's ``torch.compile`` guards (never compile it).

    ``step`` runs without autograd, as torch's wrapper does for a non-differentiable optimizer;
    ``differentiable=True`` is refused, since that wrapper would record the step instead."""

    def __init__(self, params: Any, **kwargs: Any) -> None:
        if kwargs.get("differentiable"):
            raise ValueError("EagerAdam does not support differentiable=True; use torch.optim.Adam")
        super().__init__(params, **kwargs)

    def step(self, closure: Optional[Callable[[], float]] = None) -> Optional[float]:  # type: ignore[override]
        with torch.no_grad():
            return _STEP(self, closure)

    def zero_grad(self, set_to_none: bool = True) -> None:
        _ZERO_GRAD(self, set_to_none)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        _ADD_PARAM_GROUP(self, param_group)

    def state_dict(self) -> dict[str, Any]:
        return _STATE_DICT(self)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        _LOAD_STATE_DICT(self, state_dict)
