"""Lines a loop would log at every pass (a poll finding a base path missing, a version failing
its load again with the same error), logged once while they stay the same: their repeats are
counted, and the count told in one line when the line changes or its cause ends. 10,000 models
at a missing path log 10,000 lines once, not 10,000 lines a second.

Example:
    >>> said = RepeatedLog(logging.getLogger("example"))
    >>> [said.report("m", logging.ERROR, "no base path /x") for _ in range(3)]
    [True, False, False]
    >>> said.repeats("m")
    2
    >>> said.report("m", logging.ERROR, "no base path /y")  # changed: logged (and the 2 repeats told)
    True
"""

from __future__ import annotations

import logging
import threading


class RepeatedLog:
    """One logger's lines by key (what they are about): each logged when it first appears or
    changes, its repeats counted meanwhile."""

    def __init__(self, logger: logging.Logger):
        self.logger = logger
        self._lock = threading.Lock()
        self._last: dict = {}  # key -> [message, repeats]

    def report(self, key, level: int, message: str, detail: str = "") -> bool:
        """Logs `message` (with `detail`, which is not compared) unless it is what `key` said last;
        True if it was logged."""
        with self._lock:
            last = self._last.get(key)
            if last is not None and last[0] == message:
                last[1] += 1
                return False
            self._end(key)
            self._last[key] = [message, 0]
        self.logger.log(level, "%s%s", message, detail)
        return True

    def clear(self, key) -> None:
        """`key`'s cause has ended: its repeats, if any, are told, and its next line is logged."""
        with self._lock:
            self._end(key)

    def repeats(self, key) -> int:
        with self._lock:
            return self._last[key][1] if key in self._last else 0

    def _end(self, key) -> None:
        last = self._last.pop(key, None)
        if last is not None and last[1]:
            self.logger.info("repeated %d more times since logged (%s): %s", last[1], key, last[0][:200])
