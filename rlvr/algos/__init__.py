"""Pure tensor functions of the algorithm: advantages, policy losses, KL estimators, aggregation."""
