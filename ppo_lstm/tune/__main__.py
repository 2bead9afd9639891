"""``python -m ppo_lstm.tune`` (also ``tune-ppo-lstm``)."""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
