"""Using a trained policy outside training.

- ``policy.py``: ``TradingPolicy``, a trained policy fed one bar at a time;
- ``predict.py``: the decision command line (``predict-ppo-lstm``, ``python -m ppo_lstm.predict``);
- ``export_onnx.py``: the ONNX export command line (``export-ppo-lstm``);
- ``onnx_model.py``: the exported graph's inputs, outputs and metadata, and ``OnnxStep``.
"""
