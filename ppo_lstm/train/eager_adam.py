"""Adam for a trainer that runs eagerly: torch's own Adam, without the import of ``torch._dynamo``.

``torch.optim.Optimizer`` wraps ``step``, ``zero_grad``, ``add_param_group``, ``state_dict``
and ``load_state_dict`` so that ``torch.compile`` leaves them alone, and each wrapper imports
``torch._dynamo`` on its first call. Nothing here is compiled, so :class:`EagerAdam` calls the
functions those wrappers wrap, where each has exactly one wrapper of a kind torch is known to use
(:func:`resolve_methods`; otherwise torch's methods, with a warning). The arithmetic, the fused
kernel, the state, ``state_dict`` and the step hooks are torch's: its updates and checkpoints are
bitwise those of ``torch.optim.Adam`` (``tests/train/test_eager_adam.py``). The state of a
parameter of shape ``S`` is torch's: ``exp_avg`` and ``exp_avg_sq`` of shape ``S`` and a scalar
``step``. What the import costs a process: docs/benchmarks.md, "Start-up".
"""
from __future__ import annotations

import os
import sys
import warnings
from typing import Any, Callable, Optional

import torch

# Where torch defines the wrappers it puts around these methods: the torch.compile guard
# (torch._compile._disable_dynamo) and, around ``step``, the grad-mode wrapper of torch.optim.
KNOWN_WRAPPERS = ("torch/_compile.py", "torch/optim/optimizer.py")
METHODS = ("step", "zero_grad", "add_param_group", "state_dict", "load_state_dict")


def unwrap_guard(method: Callable[..., Any]) -> Optional[Callable[..., Any]]:
    """The function under ``method``'s one wrapper, where that wrapper is one of
    :data:`KNOWN_WRAPPERS`; None where ``method`` has no wrapper, several, or another one."""
    inner = getattr(method, "__wrapped__", None)
    code = getattr(method, "__code__", None)
    if inner is None or hasattr(inner, "__wrapped__") or code is None:
        return None
    return inner if code.co_filename.replace(os.sep, "/").endswith(KNOWN_WRAPPERS) else None


def resolve_methods(cls: type = torch.optim.Adam) -> dict[str, Callable[..., Any]]:
    """Each of :data:`METHODS` of ``cls`` without its guard; where any is not wrapped as
    :func:`unwrap_guard` expects, all of them as ``cls`` has them, with one warning."""
    unwrapped = {name: unwrap_guard(getattr(cls, name)) for name in METHODS}
    missing = [name for name, inner in unwrapped.items() if inner is None]
    if not missing:
        return unwrapped  # type: ignore[return-value]
    why = " (torch._dynamo, imported already, wraps them again)" if "torch._dynamo" in sys.modules else ""
    warnings.warn(f"this torch wraps {cls.__name__}.{', '.join(missing)} otherwise than EagerAdam knows{why}; "
                  f"it trains with torch's own methods (each process then imports torch._dynamo, a few seconds)",
                  RuntimeWarning, stacklevel=2)
    return {name: getattr(cls, name) for name in METHODS}


_METHODS = resolve_methods()


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
            return _METHODS["step"](self, closure)

    def zero_grad(self, set_to_none: bool = True) -> None:
        _METHODS["zero_grad"](self, set_to_none)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        _METHODS["add_param_group"](self, param_group)

    def state_dict(self) -> dict[str, Any]:
        return _METHODS["state_dict"](self)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        _METHODS["load_state_dict"](self, state_dict)
