"""Held-out evaluation: greedy accuracy and pass@k."""
