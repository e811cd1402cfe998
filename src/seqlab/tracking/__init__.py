"""Experiment tracking: W&B runs (offline by default) and the local HTML report."""
