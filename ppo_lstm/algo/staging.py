"""Host -> device staging of an env step's inputs: one copy per step, whatever the device.

Shapes: N envs, D obs size. The staging buffer is one flat float32 row, in segments:

    obs [N*D] | episode starts [N] | rewards of the previous step [N]
    | final obs of the k envs that step cut [k*D, padded to N*D] | their env indices [k, padded to N]

Every segment is contiguous and starts 64-byte aligned, so the views handed to the model
have the layout of tensors made from the NumPy arrays directly (and give bit-identical results).

On a GPU the host buffer is pinned and travels in one ``non_blocking`` copy. On the
CPU the host buffer *is* the device buffer: staging costs a few NumPy writes and no copy.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch
from torch import Tensor


ALIGN = 16  # floats: 64 bytes. Math libraries may round differently on unaligned rows (MKL, for one)


def _aligned(size: int) -> int:
    """``size`` rounded up to a multiple of :data:`ALIGN`."""
    return -(-size // ALIGN) * ALIGN


class StepStaging:
    """One env step's inputs, written on the host and uploaded to ``device`` in one copy."""

    def __init__(self, num_envs: int, obs_dim: int, device: torch.device) -> None:
        n, d = num_envs, obs_dim
        self.num_envs, self.obs_dim, self.device = n, d, device
        self.cut_count = 0  # k: envs whose episode the last staged step cut (time limit)
        sizes = [n * d, n, n, n * d, n]
        starts = np.cumsum([0] + [_aligned(size) for size in sizes])  # every segment 64-byte aligned
        bounds = [(int(start), int(start) + size) for start, size in zip(starts, sizes)]
        on_gpu = device.type == "cuda"
        self.host = torch.zeros(int(starts[-1]), dtype=torch.float32, pin_memory=on_gpu)  # [~2ND + 3N]
        self.device_buffer = torch.zeros_like(self.host, device=device) if on_gpu else self.host
        host = self.host.numpy()
        self._host_obs = host[slice(*bounds[0])].reshape(n, d)  # [N, D]
        self._host_starts = host[slice(*bounds[1])]  # [N]
        self._host_rewards = host[slice(*bounds[2])]  # [N]
        self._host_final_obs = host[slice(*bounds[3])].reshape(n, d)  # [N, D], first k rows used
        self._host_cut_index = host[slice(*bounds[4])]  # [N], first k used
        buf = self.device_buffer
        self.obs = buf[slice(*bounds[0])].view(n, d)  # [N, D]
        self.starts = buf[slice(*bounds[1])]  # [N] 1.0 where obs begins an episode
        self.rewards = buf[slice(*bounds[2])]  # [N]
        self._final_obs = buf[slice(*bounds[3])].view(n, d)
        self._cut_index = buf[slice(*bounds[4])]

    def put_inputs(self, obs: np.ndarray, episode_start: np.ndarray) -> None:
        """Stage the policy's next inputs: ``obs`` ``[N, D]`` and ``episode_start`` ``[N]`` (bool)."""
        np.copyto(self._host_obs, obs, casting="same_kind")
        np.copyto(self._host_starts, episode_start, casting="unsafe")

    def put_outcome(self, rewards: np.ndarray, cut: np.ndarray, final_obs: Optional[np.ndarray]) -> None:
        """Stage what the last env step gave: ``rewards`` ``[N]``, ``cut`` ``[N]`` (bool: a time
        limit ended the episode) and ``final_obs`` ``[N, D]``, read at the cut rows only (None
        when no episode ended)."""
        np.copyto(self._host_rewards, rewards, casting="same_kind")
        rows = np.flatnonzero(cut)
        self.cut_count = len(rows)
        if self.cut_count:
            self._host_final_obs[: self.cut_count] = final_obs[rows]
            self._host_cut_index[: self.cut_count] = rows

    def upload(self) -> None:
        """Make the staged values visible in the device views (one non-blocking copy on a GPU).

        The pinned buffer may be rewritten once the GPU has consumed the copy; the rollout
        waits for each step's actions before it stages the next step, which guarantees that."""
        if self.device_buffer is not self.host:
            self.device_buffer.copy_(self.host, non_blocking=True)

    def cut(self) -> tuple[Tensor, Tensor]:
        """On the device: the indices ``[k]`` (int64) and final observations ``[k, D]`` of the envs cut."""
        k = self.cut_count
        return self._cut_index[:k].long(), self._final_obs[:k]
