"""The parts of the GPU acceptance command, ``bench/gpu_check.py``:

- ``plan.py``: :class:`Plan` (what to run, and on which device: CUDA, or the CPU standing in
  for it with ``--rehearse-on-cpu``), the machine's description, and child processes;
- ``inprocess.py``: env-steps/s of the training loop, the LSTM's dtypes under bf16 autocast,
  synchronizing CUDA calls;
- ``jobs.py``: the pytest file, distributed runs, resume across devices, the stalled peer;
- ``report.py``: each phase guarded, the verdict, the markdown table and the JSON line.
"""
