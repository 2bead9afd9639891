"""CUDA workers: which GPU a worker takes, the numerics every GPU worker runs with, and
whether a GPU has bfloat16 hardware.

Numerics (:func:`configure_numerics`), set in every GPU worker before its first kernel:
- the cuDNN LSTM of the update and every float32 matrix product run in IEEE float32, as
  the rollout's ``lstm_cell`` does; left at torch's defaults, cuDNN RNNs use TF32 on
  Ampere and Hopper, and the update's first minibatch would no longer replay the
  rollout's log-probs (a biased approx-KL and clip fraction). cuDNN convolutions are set
  alike, and the legacy ``torch.backends.cudnn.allow_tf32`` flag to match: torch checks
  every read of that flag (by a library, or by inductor) against cuDNN's RNN and
  convolution ``fp32_precision``, and raises "a mix of the legacy and new APIs" when
  they differ;
- with ``--deterministic`` (the default), cuBLAS and cuDNN use deterministic algorithms,
  so runs of one seed repeat bit for bit;
- ``torch.utils.deterministic.fill_uninitialized_memory`` is off. Deterministic mode
  turns it on, and then every ``torch.empty`` is filled with NaN before use, a debugging
  aid (its cost: docs/gpu.md, "What a GPU worker does"). No op of the training loop reads
  memory it has not written, so results stay bitwise repeatable without it
  (``tests/distributed/test_cuda.py`` checks two runs).

Also here: :func:`gpu_index_for` (the GPU of a worker's ``LOCAL_RANK``), :func:`require_bf16`,
and :func:`count_syncs` (the synchronizing CUDA calls of a function, as the tests count them).
"""
from __future__ import annotations

import os
import warnings
from typing import Any, Callable

import torch

from ..errors import UsageError

CUBLAS_WORKSPACE = ":4096:8"  # what cuBLAS needs for deterministic results (CUDA >= 10.2)


def gpu_index_for(local_rank: int, visible: int) -> int:
    """The CUDA device index of the worker with ``local_rank`` on a machine where this process
    sees ``visible`` GPUs: its own when there are enough; the one GPU when a scheduler made
    exactly one visible to each process (``CUDA_VISIBLE_DEVICES`` per process, as SLURM
    does); else a :class:`UsageError` naming the numbers."""
    if 0 <= local_rank < visible:
        return local_rank
    if visible == 1:
        return 0
    raise UsageError(f"worker LOCAL_RANK {local_rank} but this process sees {visible} GPU"
                     f"{'' if visible == 1 else 's'} "
                     f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}); "
                     f"start at most {max(visible, 1)} worker(s) per machine (torchrun --nproc-per-node "
                     f"{max(visible, 1)}), make one GPU visible to each process, or use --device cpu")


def configure_numerics(deterministic: bool) -> None:
    """Set this process's CUDA numerics (see the module docstring). Call it before the
    first CUDA kernel: cuBLAS reads its workspace setting when it starts."""
    _set_fp32_precision("ieee")
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    torch.backends.cudnn.deterministic = deterministic
    torch.backends.cudnn.benchmark = False
    # warn_only: an op without a deterministic CUDA kernel warns instead of stopping the run
    torch.use_deterministic_algorithms(deterministic, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = False  # type: ignore[attr-defined]


def numerics_settings() -> dict[str, Any]:
    """What :func:`configure_numerics` sets, as this process has it now."""
    return {
        "cudnn_rnn_fp32_precision": _fp32_precision("cudnn.rnn"),
        "cudnn_conv_fp32_precision": _fp32_precision("cudnn.conv"),
        "matmul_fp32_precision": _fp32_precision("cuda.matmul"),
        "cudnn_deterministic": torch.backends.cudnn.deterministic,
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "deterministic_warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
        "fill_uninitialized_memory": bool(torch.utils.deterministic.fill_uninitialized_memory),  # type: ignore[attr-defined]
    }


def restore_numerics(settings: dict[str, Any]) -> None:
    """Put back what :func:`numerics_settings` returned (for tests)."""
    _set_cudnn_precision(settings["cudnn_rnn_fp32_precision"], settings["cudnn_conv_fp32_precision"])
    _set_backend_precision("cuda.matmul", settings["matmul_fp32_precision"])
    torch.backends.cudnn.deterministic = settings["cudnn_deterministic"]
    torch.backends.cudnn.benchmark = settings["cudnn_benchmark"]
    torch.use_deterministic_algorithms(settings["deterministic_algorithms"],
                                       warn_only=settings["deterministic_warn_only"])
    torch.utils.deterministic.fill_uninitialized_memory = settings["fill_uninitialized_memory"]  # type: ignore[attr-defined]


def require_bf16(device: torch.device) -> None:
    """UsageError when ``--autocast bf16`` is asked of a GPU without bfloat16 hardware
    (emulation does not count: it is slower than float32)."""
    if device.type == "cuda" and not torch.cuda.is_bf16_supported(including_emulation=False):
        raise UsageError(f"--autocast bf16: {torch.cuda.get_device_name(device)} has no bfloat16 hardware; "
                         f"leave --autocast off")


# What torch's sync debug mode says at each synchronizing call. Its first use in a process
# also warns, once, that the mode "does not yet detect all synchronizing operations": that
# warning is no sync, and counting it made every first count one too high (seen on an H200).
SYNC_WARNING = "called a synchronizing CUDA operation"


def is_sync_warning(message: object) -> bool:
    """Whether a warning ``message`` from ``torch.cuda.set_sync_debug_mode("warn")`` reports a sync."""
    return SYNC_WARNING in str(message)


def count_syncs(fn: Callable[[], Any]) -> int:
    """How many synchronizing CUDA calls ``fn()`` makes (``torch.cuda.set_sync_debug_mode``
    warns at each); for the tests and the GPU acceptance command."""
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum(is_sync_warning(w.message) for w in caught)


def _backend(name: str) -> Any:
    module: Any = torch.backends
    for part in name.split("."):
        module = getattr(module, part)
    return module


def _fp32_precision(name: str) -> str:
    return str(getattr(_backend(name), "fp32_precision", "n/a"))


def _set_backend_precision(name: str, value: str) -> None:
    backend = _backend(name)
    if hasattr(backend, "fp32_precision") and value != "n/a":
        backend.fp32_precision = value


def _set_fp32_precision(value: str) -> None:
    """IEEE (or TF32) float32 for cuDNN RNNs and convolutions and CUDA matrix products. torch
    before 2.9 has no ``fp32_precision``; its ``allow_tf32`` flags mean the same."""
    _set_cudnn_precision(value, value)
    _set_backend_precision("cuda.matmul", value)
    if not hasattr(torch.backends.cudnn.rnn, "fp32_precision"):  # pragma: no cover - older torch
        torch.backends.cuda.matmul.allow_tf32 = value == "tf32"
        torch.backends.cudnn.allow_tf32 = value == "tf32"


def _set_cudnn_precision(rnn: str, conv: str) -> None:
    """cuDNN's RNN and convolution ``fp32_precision``, with the legacy ``allow_tf32`` flag set
    first to agree with them (setting it resets both to "none"): torch compares the three on
    every read of ``torch.backends.cudnn.allow_tf32``."""
    if hasattr(torch.backends.cudnn.rnn, "fp32_precision"):
        torch.backends.cudnn.allow_tf32 = rnn == conv == "tf32"
    _set_backend_precision("cudnn.rnn", rnn)
    _set_backend_precision("cudnn.conv", conv)
