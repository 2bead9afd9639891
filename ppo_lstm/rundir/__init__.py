"""What a run leaves on disk.

- ``checkpoint.py``: safe checkpoint containers, atomic files and ``CheckpointDir``;
- ``lock.py``: ``RunLock``, one training job per run dir;
- ``logger.py``: ``RunLogger``: metrics.csv, the episode and update lines, TensorBoard.
"""
