"""Recurrent (LSTM) PPO for trading, on one device or many."""

__version__ = "0.1.0"
