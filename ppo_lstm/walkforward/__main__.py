"""``python -m ppo_lstm.walkforward`` (also ``walkforward-ppo-lstm``)."""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
