"""Training: the RL loop, the policy update, warm start, checkpoints and metrics."""
