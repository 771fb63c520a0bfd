"""Label values as keys: how a task's classes are matched and ordered, whatever a file writes.

>>> label_key("1.0") == label_key(1) == "1"
True
"""

from __future__ import annotations

import math


def number(text: str) -> float | None:
    """`text` as a finite number, or None.

    >>> number("2.50"), number("inf"), number("bug")
    (2.5, None, None)
    """
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def label_key(value) -> str:
    """A label value as one string: numbers by value ("1.0", "1" and 1 -> "1"), text stripped.

    >>> [label_key(v) for v in ("1.0", 1, " bug ", "2.50", True)]
    ['1', '1', 'bug', '2.5', 'true']
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    value_number = number(value) if isinstance(value, str) else (float(value) if isinstance(value, (int, float))
                                                                 else None)
    if value_number is None:
        return str(value).strip()
    return str(int(value_number)) if value_number == int(value_number) else repr(value_number)


def sorted_labels(values) -> tuple[str, ...]:
    """The distinct label keys of `values`, sorted: as numbers when they all are.

    >>> sorted_labels(["10", "9", 9.0])
    ('9', '10')
    """
    keys = {label_key(value) for value in values}
    numbers = all(number(key) is not None for key in keys)
    return tuple(sorted(keys, key=lambda key: (number(key), key) if numbers else (0.0, key)))
