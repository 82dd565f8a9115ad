"""Analysis: pass@k, entropy and run reports."""
