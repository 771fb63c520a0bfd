"""What kerasbert and its peer (benchmarks/peer_torch.py) share: batches and
examples on disk, held-out scores, timing. NumPy and the standard library only: the peers'
environment has neither kerasbert nor TensorFlow.

A batch file (`.npz`) holds rows, `batch_size` of them a step, in training order:
    token_ids, segment_ids, padding_mask   int32 (rows, seq)
    mask_positions, mask_ids               int32 (rows, K): masked slots, padded with 0
    mask_weights                           float32 (rows, K): 1 for a real slot, 0 for padding
    nsp_labels                             int32 (rows,): 1 = B follows A
    nsp_weights                            float32 (rows,): 0 where the row has no NSP pair
Task examples are JSON Lines in training order: `{"words", "tags"}` or `{"id", "question",
"context", "answers": [{"text", "start"}]}`.

Example:
    step = batch(load_rows("runs/bench-peers/inputs/heldout.npz"), 0, 32)  # rows 0..31
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

FIELDS = ("token_ids", "segment_ids", "padding_mask", "mask_positions", "mask_ids", "mask_weights",
          "nsp_labels", "nsp_weights")


def save_rows(path: str, rows: dict[str, np.ndarray]) -> None:
    np.savez(path, **{name: rows[name] for name in FIELDS})


def load_rows(path: str) -> dict[str, np.ndarray]:
    with np.load(path) as data:
        return {name: data[name] for name in FIELDS}


def batch(rows: dict[str, np.ndarray], step: int, batch_size: int) -> dict[str, np.ndarray]:
    """Rows `step * batch_size` up to the next step's first row."""
    return {name: values[step * batch_size:(step + 1) * batch_size] for name, values in rows.items()}


def heldout_scores(mlm_logits: np.ndarray, nsp_logits: np.ndarray, rows: dict[str, np.ndarray]) -> dict:
    """Accuracy and cross-entropy of the MLM slots (logits (rows, K, vocab) at `mask_positions`)
    and of NSP (logits (rows, 2)), each a mean over real slots and NSP rows only.

    >>> rows = {"mask_ids": np.array([[1, 0]]), "mask_weights": np.array([[1.0, 0.0]]),
    ...         "nsp_labels": np.array([1]), "nsp_weights": np.array([1.0])}
    >>> heldout_scores(np.array([[[0.0, 5.0], [9.0, 0.0]]]), np.array([[0.0, 1.0]]), rows)["mlm_accuracy"]
    1.0
    """
    mlm_accuracy, mlm_loss = _weighted_scores(mlm_logits, rows["mask_ids"], rows["mask_weights"])
    nsp_accuracy, nsp_loss = _weighted_scores(nsp_logits, rows["nsp_labels"], rows["nsp_weights"])
    return {"mlm_accuracy": mlm_accuracy, "mlm_loss": mlm_loss, "nsp_accuracy": nsp_accuracy, "nsp_loss": nsp_loss}


def _weighted_scores(logits: np.ndarray, labels: np.ndarray, weights: np.ndarray) -> tuple[float, float]:
    """(accuracy, cross-entropy) of `logits` (..., classes) against `labels`, weighted means."""
    shifted = logits.astype(np.float64) - logits.max(-1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    target = np.take_along_axis(log_p, labels[..., None].astype(np.int64), -1)[..., 0]
    weights = weights.astype(np.float64)
    total = max(weights.sum(), 1.0)
    return float(((logits.argmax(-1) == labels) * weights).sum() / total), float(-(target * weights).sum() / total)


def write_json(path: str, value) -> None:
    """Written beside and renamed: a reader never sees half a file."""
    _write_text(path, json.dumps(value, indent=2))


def read_json(path: str):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def save_examples(path: str, examples: list[dict]) -> None:
    """Examples as JSON Lines, one a line, in the order given (the order of training).

    >>> save_examples("/tmp/ner.jsonl", [{"words": ["Paris"], "tags": ["B-LOC"]}])
    >>> load_examples("/tmp/ner.jsonl")
    [{'words': ['Paris'], 'tags': ['B-LOC']}]
    """
    _write_text(path, "".join(json.dumps(example, ensure_ascii=False) + "\n" for example in examples))


def load_examples(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def _write_text(path: str, text: str) -> None:
    with open(path + ".partial", "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(path + ".partial", path)


def time_batches(call, items: list, batch_size: int, repeats: int) -> list[float]:
    """Items/s of each of `repeats` passes of `call` over `items`, `batch_size` at a time.

    >>> rates = time_batches(lambda texts: [t.upper() for t in texts], ["a", "b", "c"], 2, repeats=2)
    >>> len(rates)
    2
    """
    rates = []
    for _ in range(repeats):
        started = time.perf_counter()
        for i in range(0, len(items), batch_size):
            call(items[i:i + batch_size])
        rates.append(len(items) / (time.perf_counter() - started))
    return rates


def timed_pass(call, texts: list[str], batch_size: int) -> tuple[list[float], list]:
    """Each call's seconds and every text's answer: one pass of `call` (texts -> an answer each:
    a class index, a list of entities; JSON values for a worker) over `texts`, `batch_size` at a time.

    >>> seconds, answers = timed_pass(lambda texts: [len(t) for t in texts], ["a", "bb", "ccc"], 2)
    >>> len(seconds), answers
    (2, [1, 2, 3])
    """
    seconds, answers = [], []
    for begin in range(0, len(texts), batch_size):
        started = time.perf_counter()
        found = call(texts[begin:begin + batch_size])
        seconds.append(time.perf_counter() - started)
        answers.extend(found)
    return seconds, answers


def answer_passes(call, texts: list[str], requests=sys.stdin, answers=sys.stdout) -> None:
    """A worker's loop: for each line `{"batch_size": B, "count": N}` on `requests`, one `timed_pass`
    of `call` over the first N texts, answered as a line `{"seconds": [...], "answers": [...]}`. A
    bench keeps workers of several systems alive and asks each in turn, so the systems' passes
    interleave and the machine's drift hits all alike.

    >>> import io
    >>> out = io.StringIO()
    >>> answer_passes(lambda texts: [0] * len(texts), ["a", "b", "c"], io.StringIO('{"batch_size": 2, "count": 3}\\n'), out)
    >>> json.loads(out.getvalue())["answers"]
    [0, 0, 0]
    """
    for line in requests:
        request = json.loads(line)
        seconds, found = timed_pass(call, texts[:request["count"]], request["batch_size"])
        answers.write(json.dumps({"seconds": seconds, "answers": found}) + "\n")
        answers.flush()
