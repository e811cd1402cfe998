"""The error a neural metric raises for its model or its inputs."""

from __future__ import annotations


class MetricModelError(ValueError):
    """A metric model that cannot be found or read, or inputs it cannot score; the message names the file or
    key and what to do."""
