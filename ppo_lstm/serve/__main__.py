"""``python -m ppo_lstm.serve`` (also ``serve-ppo-lstm``); the command lives in :mod:`ppo_lstm.serve.cli`."""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
