"""What a saved-run fixture's resume is compared by: the sha256 of a checkpoint's model, and the key
of this machine's CPU numerics (its vendor and torch's CPU capability, the SIMD kernels torch
dispatches to). Bitwise training results are comparable only between machines of one key. Used by
``test_migrations.py`` and by ``tests/fixtures/saved_runs/*.sh`` at the fixtures' own commits."""
from __future__ import annotations

import hashlib
from pathlib import Path

import torch


def model_sha256(path: Path | str) -> str:
    """sha256 over the ``model`` state dict of the checkpoint at ``path``, its tensors in key order."""
    digest = hashlib.sha256()
    for key, value in sorted(torch.load(path, weights_only=True)["model"].items()):
        digest.update(key.encode())
        digest.update(value.detach().contiguous().numpy().tobytes())
    return digest.hexdigest()


def cpu_key() -> str:
    """``"<vendor_id> <capability>"``, e.g. ``"GenuineIntel AVX512"`` (``unknown`` where /proc/cpuinfo
    does not say)."""
    vendor = "unknown"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("vendor_id"):
                vendor = line.split(":", 1)[1].strip()
                break
    return f"{vendor} {torch.backends.cpu.get_cpu_capability()}"
