"""Training: the Lightning module, its optimizer and schedule, losses, the run-folder callbacks (fit), the
quick in-training evaluation, and checkpoint averaging."""
