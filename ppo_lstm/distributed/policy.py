"""Per-rank policy: each rank's share of the episodes, and which ranks trade ``--data``."""
from __future__ import annotations

from ..config.schema import TrainConfig


def episode_share(total: int, rank: int, world_size: int) -> int:
    """Episodes rank ``rank`` must finish: total // world_size, plus the remainder on rank 0."""
    share = total // world_size
    return share + total % world_size if rank == 0 else share


def remaining_episode_shares(total: int, done: list[int], world_size: int) -> list[int]:
    """Episodes each rank still has to count so that the job ends at exactly ``total``.

    ``done`` holds what each rank already counted (``[]`` when a resume changed the
    layout). The plain split (:func:`episode_share` of ``total``) is kept whenever no
    rank has overshot it, so a resumed run stops exactly where an uninterrupted one
    would; otherwise what is left is split afresh the same way.
    """
    if len(done) == world_size:
        left = [episode_share(total, r, world_size) - d for r, d in enumerate(done)]
        if min(left) >= 0:
            return left
    return [episode_share(max(0, total - sum(done)), r, world_size) for r in range(world_size)]


def trades_history(config: TrainConfig, rank: int) -> bool:
    """Whether ``rank`` trades ``--data``: rank 0 does; the others simulate markets (for
    diversity) unless ``--data-all-ranks`` is set, or ``--features`` is (a simulated
    market has no feature columns to fill the observation with)."""
    return config.data is not None and (rank == 0 or config.data_all_ranks or bool(config.env.features))
