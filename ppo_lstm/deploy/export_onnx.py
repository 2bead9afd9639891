"""Export a checkpoint's recurrent step to ONNX, with the metadata a consumer needs.

    export-ppo-lstm --checkpoint checkpoints/best.pt --onnx policy.onnx
    python -m ppo_lstm.deploy.export_onnx --checkpoint checkpoints --onnx policy.onnx

The graph and its metadata: ``ppo_lstm.deploy.onnx_model``. It is exported by torch's
TorchScript-based exporter (``dynamo=False``: no onnxscript needed), opset 17, with a
dynamic batch axis, checked by ``onnx.checker`` and written atomically. Needs the
``onnx`` extra (``pip install 'ppo-lstm-trader[onnx]'``). Bad input: one ``error:`` line
on stderr, exit code 2.
"""
from __future__ import annotations

import argparse
import io
import os
import sys
import warnings
from pathlib import Path
from typing import Optional

import torch
from torch import Tensor, nn

from ..algo.agent import RecurrentActorCritic
from ..config.schema import TrainConfig
from ..errors import EXIT_USAGE, OneLineParser, UsageError, one_line
from ..rundir.checkpoint import CheckpointError, atomic_write_bytes
from .onnx_model import INPUTS, OUTPUTS, metadata
from .torch_step import checkpoint_fingerprint

OPSET = 17


class RecurrentStep(nn.Module):
    """The agent's step without episode starts: (obs [B, D], h [B, H], c [B, H]) ->
    (logits [B, A], value [B], h' [B, H], c' [B, H]); the arithmetic of
    :meth:`RecurrentActorCritic.step` (``torch.lstm_cell`` on the LSTM's weights)."""

    def __init__(self, agent: RecurrentActorCritic) -> None:
        super().__init__()
        self.agent = agent

    def forward(self, obs: Tensor, h: Tensor, c: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        agent, lstm = self.agent, self.agent.lstm
        h2, c2 = torch.lstm_cell(agent.encoder(obs), (h, c), lstm.weight_ih_l0, lstm.weight_hh_l0, lstm.bias_ih_l0,
                                 lstm.bias_hh_l0)
        return agent.policy_head(h2), agent.value_head(h2).squeeze(-1), h2, c2


def export_onnx(agent: RecurrentActorCritic, config: TrainConfig, path: str | os.PathLike, source: str = "") -> str:
    """Write ``agent``'s step to ``path`` (atomically) with its metadata; returns the fingerprint."""
    try:
        import onnx
    except ImportError:
        raise UsageError("exporting to ONNX needs the onnx package: pip install 'ppo-lstm-trader[onnx]'") from None
    path = Path(path)
    agent = agent.to("cpu").eval()
    step = RecurrentStep(agent).eval()
    H = config.lstm_size
    example = (torch.zeros(1, config.env.obs_dim), torch.zeros(1, H), torch.zeros(1, H))
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
        torch.onnx.export(step, example, buffer, dynamo=False, opset_version=OPSET, input_names=list(INPUTS),
                          output_names=list(OUTPUTS), dynamic_axes={name: {0: "batch"} for name in INPUTS + OUTPUTS})
    model = onnx.load_from_string(buffer.getvalue())
    fingerprint = checkpoint_fingerprint(agent, config)
    meta = metadata(config.env, config.hidden_size, H, fingerprint, source)
    del model.metadata_props[:]
    for key, value in meta.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    model.producer_name = "ppo-lstm-trader"
    onnx.checker.check_model(model)
    data = model.SerializeToString()
    try:
        atomic_write_bytes(path, lambda handle: handle.write(data), "check that its directory exists and is writable")
    except CheckpointError as err:
        raise UsageError(f"--onnx: {err}") from None
    return fingerprint


# ----------------------------------------------------------------------------- the command line


def build_parser(prog: Optional[str] = None) -> argparse.ArgumentParser:
    parser = OneLineParser(prog=prog or "python -m ppo_lstm.deploy.export_onnx",
                           description="Export a checkpoint's recurrent policy step to ONNX: (observation, h, c) -> "
                                       "(logits, value, h', c'), with the metadata needed to build observations.",
                           epilog="Run it with: predict-ppo-lstm --model FILE --data prices.csv. Bad input: one "
                                  "'error:' line on stderr, exit code 2.")
    parser.add_argument("--checkpoint", required=True, type=Path, metavar="PATH",
                        help="a .pt file, or a checkpoint dir (its best.pt, else the checkpoint 'latest' names)")
    parser.add_argument("--onnx", required=True, type=Path, metavar="FILE", help="the .onnx file to write")
    return parser


def main(argv: Optional[list[str]] = None, prog: Optional[str] = None) -> int:
    """The CLI; returns the exit code (2 for bad input, one line on stderr)."""
    if prog is None and os.path.basename(sys.argv[0]) == "export-ppo-lstm":
        prog = "export-ppo-lstm"
    args = build_parser(prog).parse_args(argv)
    from ..evaluation.loading import checkpoint_file, load_policy

    try:
        target = args.onnx
        if target.is_dir():
            raise UsageError(f"--onnx {target} is a directory; name a file")
        if not (target.parent if str(target.parent) else Path(".")).is_dir():
            raise UsageError(f"cannot write --onnx {target}: no directory {target.parent}")
        path = checkpoint_file(args.checkpoint)
        agent, config = load_policy(path)
        fingerprint = export_onnx(agent, config, target, source=path.name)
    except UsageError as err:
        print(f"error: {one_line(err, 1000)}", file=sys.stderr)
        return EXIT_USAGE
    env = config.env
    features = f", features {','.join(env.feature_names)}" if env.feature_names else ""
    features += f" over windows {env.feature_window}" if env.feature_names and len(env.feature_windows) > 1 else ""
    features += f", EMA spans {','.join(map(str, env.spans))}" if env.spans else ""
    print(f"wrote {target}: observation {env.obs_dim} (window {env.window}{features}), LSTM {config.lstm_size}, "
          f"{env.num_actions} actions (max position {env.max_position}), from {path} (fingerprint {fingerprint[:12]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
