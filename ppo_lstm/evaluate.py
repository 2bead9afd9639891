"""``python -m ppo_lstm.evaluate`` (also ``evaluate-ppo-lstm``); the command lives in :mod:`ppo_lstm.evaluation.cli`."""
import sys

from .evaluation.cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
