"""What one row of a text signature really costs, as the SavedModel declares it.

A string element stands for `--string_input_tokens` padded tokens, whatever its length
(session.ModelWorkLimits), unless the SavedModel declares its string inputs' costs in
`assets.extra/row_costs.json` (TF Serving reads only its warm-up file there, so it ignores
this one): {signature: {input: cost}}, each cost a JSON object of

    graph_bytes_per_byte  memory the graph takes per byte of the string (tokenizing, aligning,
                          outputs that grow with the text), counted as padded tokens of
                          --activation_bytes_per_token each
    sequence_length       tokens of one window the model runs on (absent: no model term)
    room                  the fewest of the string's pieces one window holds
    doc_stride            pieces between two windows' starts
    max_windows           windows of one string at most (more: the graph refuses it)

The server cannot tokenize, so it bounds a string's pieces by its UTF-8 bytes (a word piece
holds at least one byte of the text; whitespace none), its windows by 1 + ceil((bytes - room)
/ doc_stride) up to max_windows, and its model tokens by min(bytes + sequence_length - room,
sequence_length) for one window, windows x sequence_length for more. A row costs the sum of
its declared inputs' costs (at least what an undeclared input costs by the rule above).
kerasbert's export writes the file for `entities` and `answer`; a SavedModel without it
is served as before.

Example:
    >>> cost = StringCost(graph_bytes_per_byte=256, sequence_length=16, room=9, doc_stride=4, max_windows=3)
    >>> cost.tokens(np.array([5, 30, 10**6]), activation_bytes_per_token=1024).tolist()
    [14, 56, 250048]
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os

import numpy as np

log = logging.getLogger(__name__)
FILE = os.path.join("assets.extra", "row_costs.json")


@dataclasses.dataclass(frozen=True)
class StringCost:
    """The declared cost of one string input (see the module's docstring)."""

    graph_bytes_per_byte: int = 0
    sequence_length: int = 0
    room: int = 1
    doc_stride: int = 1
    max_windows: int = 1

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{field.name} must be a non-negative integer. Received: {value!r}")
        if self.room < 1 or self.doc_stride < 1 or self.max_windows < 1:
            raise ValueError(f"room, doc_stride and max_windows must be positive. Received: {self}")

    def tokens(self, sizes: np.ndarray, activation_bytes_per_token: int) -> np.ndarray:
        """The padded tokens of strings of `sizes` bytes (int64 array, any shape)."""
        sizes = np.asarray(sizes, np.int64)
        graph = -(-sizes * self.graph_bytes_per_byte // activation_bytes_per_token)  # ceil
        if not self.sequence_length:
            return graph
        windows = np.minimum(1 + -(-np.maximum(sizes - self.room, 0) // self.doc_stride), self.max_windows)
        one = np.minimum(sizes + self.sequence_length - self.room, self.sequence_length)
        return graph + np.where(windows == 1, one, windows * self.sequence_length)


def load_row_costs(path: str) -> dict[str, dict[str, StringCost]]:
    """{signature: {input: StringCost}} from the version folder `path`'s declaration; {} when
    it has none, or one that does not parse (logged: the version is served by the default rule)."""
    file = os.path.join(path, FILE)
    if not os.path.isfile(file):
        return {}
    try:
        with open(file, encoding="utf-8") as f:
            declared = json.load(f)
        return {str(signature): {str(name): StringCost(**cost) for name, cost in inputs.items()}
                for signature, inputs in declared.items()}
    except (OSError, ValueError, TypeError, AttributeError) as error:
        log.warning("%s: ignored (%s); its strings count as --string_input_tokens each", file, error)
        return {}


def string_sizes(array: np.ndarray) -> np.ndarray:
    """The UTF-8 bytes of each row's strings (an object array of bytes), summed past the 0th
    dimension: int64 (rows,)."""
    sizes = np.fromiter((len(value.encode("utf-8")) if isinstance(value, str) else len(value)
                         for value in array.ravel()), np.int64, count=array.size).reshape(array.shape)
    return sizes.reshape(len(array), -1).sum(axis=1) if array.ndim > 1 else sizes
