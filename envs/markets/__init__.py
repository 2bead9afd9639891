"""Market sources: where the prices of each episode come from, simulated or historical.

- ``base.py``: ``Market``, the interface the env core steps (start episodes, the next bar's
  open and close, save and restore);
- ``simulated.py``: ``SimulatedMarket``, a fresh seeded path per episode;
- ``processes.py``: the simulated price processes (GBM, OU, regime, jump, GARCH, mixed),
  price paths from their variates;
- ``variates.py``: ``VariatePool``, each env's random variates drawn several episodes ahead;
- ``historical.py``: ``HistoricalMarket``, an episode is a random start offset into a data file;
- ``file_columns.py``: a file's observation columns, computed once per file and setting.
"""
