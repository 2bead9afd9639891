"""Using a trained policy outside training.

- ``policy.py``: ``TradingPolicy``, a trained policy fed one bar at a time (it composes the modules below);
- ``readouts.py``: ``StreamReadouts``, what a caller reads of a stream (``TradingPolicy``'s base);
- ``decision.py``: ``Decision``, what the policy decided after a bar, for the next bar;
- ``spec.py``: ``PolicySpec`` (what a stream needs of a trained policy) and the settings it records;
- ``torch_step.py``: ``checkpoint_fingerprint``, ``TorchStep`` (the agent's network step) and loading a
  checkpoint's: the only module of the stream that imports torch;
- ``bars.py``: the checks of the bars fed in (time, OHLCV, feature values, files) and of ``--start`` and the costs;
- ``windows.py``: the normalised returns of the last bars (``ReturnWindow``), the feature normaliser
  (``FeatureWindow``) and the ``--ema-spans`` EMAs (``EmaWindow``);
- ``book.py``: ``PaperBook``, the paper account (the env's ledger for one env) and the pending trade;
- ``state.py``: the saved state: its format, ``BarChain`` (the bars consumed and their SHA-256 chain), the
  owner checks and the atomic state file;
- ``files.py``: atomic writes and ``flock`` locks, without torch;
- ``predict.py``: the decision command line (``predict-ppo-lstm``, ``python -m ppo_lstm.predict``);
- ``export_onnx.py``: the ONNX export command line (``export-ppo-lstm``);
- ``onnx_model.py``: the exported graph's inputs, outputs and metadata, and ``OnnxStep``;

- ``times.py``: bar times as naive-UTC nanoseconds, ``numpy.datetime64`` and ISO text, without pandas.

The ONNX route (``TradingPolicy.from_onnx``, ``predict-ppo-lstm --model``) imports numpy, onnxruntime
and the env's observation code, never torch nor pandas (pandas comes in only for a value or a file the
pandas-free readers leave to it: ``times.py``, ``envs.data.plain_csv``).
"""
