"""The key of this machine's CPU numerics: its vendor and torch's CPU capability (the SIMD kernels
torch dispatches to). Bitwise training results are comparable only between machines of one key."""
from __future__ import annotations

from pathlib import Path

import torch


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
