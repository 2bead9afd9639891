#!/usr/bin/env python
"""The distributed trainer, directly: `python train_ppo_lstm_distributed.py --num-gpus N ...`.

Same flags as train_ppo_lstm.py, with --distributed always on.
"""
import sys

from ppo_lstm.cli import main

if __name__ == "__main__":
    sys.exit(main(force_distributed=True))
