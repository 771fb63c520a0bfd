"""How a span task's context windows are sized: plain arithmetic, no TensorFlow, so a config
is checked when it loads.

A window is `[CLS] question [SEP] context pieces [SEP]`, the question cut to
`max_query_length` pieces, so every window holds at least `context_room` context pieces.
Windows start `doc_stride` pieces apart: a stride above the room would skip context. BERT's
`run_squad.py` takes 128 at length 384; a shorter length takes the largest stride that
skips nothing, up to 128.

Example:
    >>> context_room(384, 64), default_doc_stride(384, 64), default_doc_stride(192, 64)
    (317, 128, 125)
"""

from __future__ import annotations

DEFAULT_DOC_STRIDE = 128  # run_squad.py's, at sequence length 384


def context_room(sequence_length: int, max_query_length: int) -> int:
    """The fewest context pieces a window holds: the packed length less the longest question
    and [CLS], [SEP], [SEP] (below 1: no room at all)."""
    return sequence_length - max_query_length - 3


def default_doc_stride(sequence_length: int, max_query_length: int) -> int:
    """The stride of a span task that declares none: 128, or the room when that is smaller."""
    return min(DEFAULT_DOC_STRIDE, context_room(sequence_length, max_query_length))
