"""What the training runs print between Keras' progress bars.

Example:
    >>> started = time.perf_counter()
    >>> stage("reading corpora", started)
    == reading corpora [0s]
"""

from __future__ import annotations

import time


def stage(message: str, started: float | None = None) -> None:
    """One `== message [elapsed]` line, flushed at once."""
    elapsed = f" [{time.perf_counter() - started:.0f}s]" if started is not None else ""
    print(f"== {message}{elapsed}", flush=True)
