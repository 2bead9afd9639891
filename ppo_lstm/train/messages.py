"""What a training run tells its user: the start-up lines, each update's metrics.csv row
and rank 0's end-of-run summary (where best.pt is and the command that evaluates it)."""
from __future__ import annotations

import math
import shlex
from pathlib import Path
from typing import Any, Optional

import torch

from ..algo.episodes import EpisodeTotals
from ..algo.ppo import UpdateStats
from ..config.plan import SHARD_FROM, BatchPlan
from ..config.schema import TrainConfig
from ..distributed import episode_share
from ..rundir.checkpoint import BEST_NAME
from .holdout import Holdout, HoldoutResult, holdout_columns
from .run_state import RunState


def startup_lines(config: TrainConfig, plan: BatchPlan, rank: int, state: RunState, resumed_from: Optional[Path],
                  holdout: Optional[Holdout], notes: list[str]) -> list[str]:
    """The lines after the log header: the batch split (``plan``'s), where a resume started, the
    costs' ramp, which workers trade --data, the hold-out, then the ``notes``."""
    c, s, world_size = config, state, plan.world_size
    fitting = c.train_for is not None  # the episodes are fitted to the time later (time_limit.EpisodeFit)
    shares = sorted({episode_share(c.episodes, r, world_size) for r in range(world_size)}, reverse=True)
    episodes = (f"episodes: fitted to --train-for {c.train_for} once a twentieth of it has passed" if fitting
                else f"episodes per worker: {' / '.join(map(str, shares))}")
    lines = [f"{plan.description}; {episodes}"]
    if world_size > 1:
        lines.append(update_split_line(plan, c.shard_update))
    if resumed_from is None and not fitting and (rounding := episode_rounding_line(c, plan)):
        lines.append(rounding)
    if resumed_from is not None:
        left = (f"--train-for {c.train_for} from here" if fitting
                else f"{max(0, c.episodes - s.global_episodes)} episodes left")
        lines.append(f"Resumed from {resumed_from} at episode {s.global_episodes}"
                     f"{'' if fitting else f'/{c.episodes}'} (update {s.update}); {left}")
    if c.cost_warmup > 0 and (c.env.fee_bps or c.env.slippage_bps):
        run = ("the episodes that fit" if fitting
               else f"the run, full by episode {math.ceil(c.cost_warmup * c.episodes)}")
        lines.append(f"Costs: fee {c.env.fee_bps:g} bps and slippage {c.env.slippage_bps:g} bps, ramped up "
                     f"from 0 over the first {c.cost_warmup:.0%} of {run} (--cost-warmup "
                     f"{c.cost_warmup:g}), so earlier episode lines are at lower costs; the hold-out always "
                     f"pays full costs")
    if c.env.features and c.data is not None and world_size > 1 and not c.data_all_ranks:
        lines.append(f"Markets: every worker trades --data, since --features {c.env.features} reads its columns "
                     f"and a simulated market has none")
    if holdout is not None:
        lines += [holdout.describe(), *holdout.warnings()]
    elif rank == 0:
        lines.append("Hold-out: none (--holdout 0 or --holdout-episodes 0); best.pt is the checkpoint whose "
                     "period had the best mean training return")
    return lines + notes


def update_split_line(plan: BatchPlan, mode: str) -> str:
    """How the workers split each update (``--shard-update``)."""
    share = plan.share_transitions
    if plan.shards_update(mode):
        return (f"Update: each of the {plan.world_size} workers computes the gradient of its share of every "
                f"minibatch (about {share} transitions), one sum per gradient step (--shard-update {mode})")
    why = f": shares of about {share} transitions, under {SHARD_FROM}, save less than the sums cost" \
        if mode == "auto" else ""
    return f"Update: every worker computes each minibatch whole, with no collective in it (--shard-update {mode}{why})"


def episode_rounding_line(config: TrainConfig, plan: BatchPlan) -> Optional[str]:
    """A line when the envs' episodes, which start together and have one length, so end together,
    make a fresh run train far more episodes than ``--episodes`` (over a quarter more); else None."""
    c, n, world_size = config, config.num_envs, plan.world_size
    most = max(episode_share(c.episodes, r, world_size) for r in range(world_size))
    rounds = math.ceil(most / n)  # each worker runs this many rounds of n episodes
    run = rounds * n * world_size
    if 4 * run <= 5 * c.episodes:
        return None
    updates = math.ceil(rounds * c.env.episode_length / plan.steps)
    return (f"Episodes: the {n * world_size} envs end their episodes together, so --episodes {c.episodes} trains "
            f"{run} episodes ({updates} updates) and counts the first {c.episodes} in the log; give a multiple "
            f"of {n * world_size} episodes or fewer --num-envs to train about what you ask for")


def metrics_row(state: RunState, stats: UpdateStats, skipped: bool, optimizer: torch.optim.Optimizer,
                rank_sps: list[float], wall: float, update_totals: EpisodeTotals,
                holdout: Optional[HoldoutResult]) -> dict[str, Any]:
    """The update's metrics.csv row (its columns in order), with the hold-out's figures on a
    checkpoint's row."""
    s = state
    return {
        "update": s.update, "episodes": s.global_episodes, "env_steps": s.env_steps,
        "wall_time_s": round(wall, 3), "policy_loss": stats.policy_loss, "value_loss": stats.value_loss,
        "entropy": stats.entropy, "approx_kl": stats.approx_kl, "clip_fraction": stats.clip_fraction,
        "explained_variance": stats.explained_variance, "epochs_run": stats.epochs_run,
        "lr_actor": optimizer.param_groups[0]["lr"], "lr_critic": optimizer.param_groups[1]["lr"],
        "skipped": int(skipped), "sps_global": round(sum(rank_sps), 1),
        "sps_per_rank": ";".join(f"{x:.1f}" for x in rank_sps),
        "episodes_finished": int(update_totals.episodes),
        **(update_totals.means() if update_totals.episodes else {}),
        **(holdout_columns(holdout) if holdout is not None else {}),
    }


def phase_lines(ranks: list[tuple[Any, float]]) -> list[str]:
    """Every rank's time by phase and the workers' peak memory (``ranks``: (shares, MiB) in rank order)."""
    lines = [f"Time by phase (rank {rank}): {shares}" for rank, (shares, _) in enumerate(ranks)]
    return lines + [f"Peak memory per worker: {' / '.join(f'{p:.0f}' for _, p in ranks)} MiB"]


def summary_lines(config: TrainConfig, last: Optional[Path], holdout: Optional[Holdout],
                  best_holdout: Optional[dict[str, Any]]) -> list[str]:
    """Rank 0's end-of-run lines: where best.pt and the ``last`` checkpoint are, the best
    hold-out figures (``best_holdout``) and the evaluate command that reproduces them."""
    best = Path(config.checkpoint_dir) / BEST_NAME
    lines = [f"Last checkpoint: {last}"]
    if not best.is_file():
        return lines + ["No best.pt: no checkpoint period finished an episode"]
    if holdout is None:
        words = ["evaluate-ppo-lstm", "--checkpoint", str(best)]
        if config.data:
            words += ["--data", *([config.data] if isinstance(config.data, str) else config.data)]
            if config.date_format:
                words += ["--date-format", config.date_format]
        return lines + [f"Best checkpoint: {best} (best mean training return of a checkpoint period; no "
                        f"hold-out, so this is in-sample)",
                        f"Evaluate it: {' '.join(shlex.quote(str(w)) for w in words)}"]
    figures = f": {best_holdout['line']}" if best_holdout else ""
    commands = holdout.evaluate_commands(str(best))
    if len(commands) == 1:
        return lines + [f"Best checkpoint: {best} (best hold-out return){figures}",
                        f"Reproduce it: {commands[0]}"]
    return lines + [f"Best checkpoint: {best} (best mean hold-out return){figures}",
                    *(f"Reproduce instrument {i + 1}: {c}" for i, c in enumerate(commands))]
