"""Plotting helpers shared by the backtest report and the training curves: matplotlib on
the headless Agg backend, and a compact palette PNG writer."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..errors import UsageError, one_line

PNG_COLORS = 256  # a palette PNG: half the size of RGBA for line plots, no visible difference


def import_pyplot() -> Any:
    """matplotlib.pyplot on the headless Agg backend, or UsageError naming the extra."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError("plotting needs matplotlib: pip install 'ppo-lstm-trader[plot]'") from None
    return plt


def save_png(fig: Any, out: Path) -> None:
    """Render ``fig`` and write it to ``out`` as a 256-colour palette PNG."""
    from PIL import Image  # a dependency of matplotlib

    fig.canvas.draw()
    image = Image.fromarray(np.asarray(fig.canvas.buffer_rgba())).convert("RGB").quantize(PNG_COLORS)
    try:
        image.save(out, format="PNG", optimize=True)
    except OSError as err:
        raise UsageError(f"cannot write {out}: {one_line(err, 200)}") from None
