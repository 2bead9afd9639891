#!/usr/bin/env python
"""Train a recurrent PPO trading agent: `python train_ppo_lstm.py --help`.

Single device by default; `--distributed` spawns one worker per device, and
`torchrun ... train_ppo_lstm.py` runs it as one worker of a torchrun job.
"""
import sys

from ppo_lstm.cli import main

if __name__ == "__main__":
    sys.exit(main())
