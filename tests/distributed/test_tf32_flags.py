"""The GPU numerics leave torch's TF32 settings readable through either API: cuDNN's RNN and
convolution precision are set together (``ppo_lstm/distributed/cuda.py``). These are flags, so
the check runs on the CPU."""
from __future__ import annotations

import pytest
import torch

from ppo_lstm.distributed import cuda as cuda_setup


@pytest.mark.parametrize("deterministic", [True, False])
def test_configured_numerics_read_back_through_the_legacy_flags(deterministic):
    saved = cuda_setup.numerics_settings()
    try:
        cuda_setup.configure_numerics(deterministic)
        now = cuda_setup.numerics_settings()
        assert now["cudnn_rnn_fp32_precision"] == now["cudnn_conv_fp32_precision"] == "ieee"
        # a library or inductor reading the legacy flags must not raise "mix of the legacy and new APIs"
        assert torch.backends.cudnn.allow_tf32 is False
        assert torch.backends.cuda.matmul.allow_tf32 is False
    finally:
        cuda_setup.restore_numerics(saved)
    assert cuda_setup.numerics_settings() == saved
