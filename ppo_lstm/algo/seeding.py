"""Seeds derived from the run's ``--seed``: one stream per (seed, rank, purpose)."""
from __future__ import annotations

import numpy as np


def derive_seed(*parts: int) -> int:
    """A 32-bit seed from several integers (seed, rank, purpose...)."""
    return int(np.random.SeedSequence([p & 0xFFFFFFFF for p in parts]).generate_state(1)[0])


def env_seeds(seed: int, rank: int, num_envs: int, generation: int = 0) -> list[int]:
    """Distinct, reproducible seeds for the ``num_envs`` envs of ``rank`` (``generation``:
    the update at which the envs were restarted, 0 at the start of a run)."""
    return [int(s) for s in np.random.SeedSequence([seed, rank, generation]).generate_state(num_envs)]
