"""Analysis: pass@k, entropy, layer probes and ablations, run reports."""
