"""The algorithm: the recurrent actor-critic, the rollout and the PPO update.

- ``agent.py``: ``RecurrentActorCritic`` (MLP encoder, LSTM, policy and value heads) and
  ``sequence_boundaries``;
- ``buffer.py``: the fixed-shape ``[T, N]`` rollout buffer, GAE and ``RolloutBatch``;
- ``staging.py``: one host -> device copy per env step (``StepStaging``);
- ``rollout.py``: ``RolloutCollector``, the envs, the carried LSTM state and the action sampler;
- ``ppo.py``: the PPO update over minibatches of whole sequences;
- ``episodes.py``: episode accounting (``EPISODE_FIELDS``, ``episode_records``, ``EpisodeTotals``);
- ``seeding.py``: seeds per (seed, rank, purpose);
- ``value_norm.py``: ``RunningMeanStd``, the running statistics of ``--norm-value``.
"""
