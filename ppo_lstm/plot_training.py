"""``python -m ppo_lstm.plot_training``; the command lives in :mod:`ppo_lstm.evaluation.plot_training`."""
import sys

from .evaluation.plot_training import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
