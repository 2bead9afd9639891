"""``python -m ppo_lstm.predict`` (also ``predict-ppo-lstm``); the command lives in :mod:`ppo_lstm.deploy.predict`."""
import sys

from .deploy.predict import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
