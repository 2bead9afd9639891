"""Market sources: the prices of each episode, simulated or historical."""
