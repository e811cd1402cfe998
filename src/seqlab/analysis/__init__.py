"""Measuring and comparing: paired significance (compare), the architecture study's tables (study), speed
against peers (speed), reference baselines (baselines)."""
