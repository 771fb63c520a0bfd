"""What kerasbert and its peer (benchmarks/peer_torch.py) share, so that both train on the
same batches and are scored and timed the same way: pretraining batches on disk, the
held-out scores and the inference timing. NumPy only: the peer's environment has no
TensorFlow.

Fine-tuning on tasks (benchmarks.tasks, benchmarks/peer_tasks.py) passes examples instead,
as JSON Lines in training order (`save_examples`): a tagging example is `{"words": [...],
"tags": [...]}`, a question `{"id", "question", "context", "answers": [{"text", "start"}]}`.

A batch file (`.npz`) holds rows, `batch_size` of them a step, in training order:
    token_ids, segment_ids, padding_mask   int32 (rows, seq)
    mask_positions, mask_ids               int32 (rows, K): masked slots, padded with 0
    mask_weights                           float32 (rows, K): 1 for a real slot, 0 for padding
    nsp_labels                             int32 (rows,): 1 = B follows A
    nsp_weights                            float32 (rows,): 0 where the row has no NSP pair

Example:
    >>> rows = load_rows("runs/bench-peers/inputs/heldout.npz")
    >>> step = batch(rows, 0, 32)  # rows 0..31
    >>> heldout_scores(mlm_logits, nsp_logits, rows)["mlm_accuracy"]  # logits at mask_positions
"""

from __future__ import annotations

import json
import os
import time

import numpy as np

FIELDS = ("token_ids", "segment_ids", "padding_mask", "mask_positions", "mask_ids", "mask_weights",
          "nsp_labels", "nsp_weights")


def save_rows(path: str, rows: dict[str, np.ndarray]) -> None:
    missing = set(FIELDS) - set(rows)
    if missing:
        raise ValueError(f"{path}: rows lack {sorted(missing)}")
    counts = {len(rows[name]) for name in FIELDS}
    if len(counts) != 1:
        raise ValueError(f"{path}: fields have different row counts {counts}")
    np.savez(path, **{name: rows[name] for name in FIELDS})


def load_rows(path: str) -> dict[str, np.ndarray]:
    with np.load(path) as data:
        return {name: data[name] for name in FIELDS}


def batch(rows: dict[str, np.ndarray], step: int, batch_size: int) -> dict[str, np.ndarray]:
    """Rows `step * batch_size` up to the next step's first row."""
    return {name: values[step * batch_size:(step + 1) * batch_size] for name, values in rows.items()}


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


def heldout_scores(mlm_logits: np.ndarray, nsp_logits: np.ndarray, rows: dict[str, np.ndarray]) -> dict:
    """Weighted accuracy and cross-entropy of the MLM slots (logits (rows, K, vocab) at
    `mask_positions`) and of NSP (logits (rows, 2)): means over real slots and NSP rows only.

    >>> rows = {"mask_ids": np.array([[1, 0]]), "mask_weights": np.array([[1.0, 0.0]]),
    ...         "nsp_labels": np.array([1]), "nsp_weights": np.array([1.0])}
    >>> heldout_scores(np.array([[[0.0, 5.0], [9.0, 0.0]]]), np.array([[0.0, 1.0]]), rows)["mlm_accuracy"]
    1.0
    """
    weights = rows["mask_weights"].astype(np.float64)
    log_p = _log_softmax(mlm_logits.astype(np.float64))
    target = np.take_along_axis(log_p, rows["mask_ids"][..., None].astype(np.int64), -1)[..., 0]
    hits = mlm_logits.argmax(-1) == rows["mask_ids"]
    nsp_weights = rows["nsp_weights"].astype(np.float64)
    nsp_log_p = _log_softmax(nsp_logits.astype(np.float64))
    nsp_target = np.take_along_axis(nsp_log_p, rows["nsp_labels"][:, None].astype(np.int64), -1)[:, 0]
    nsp_hits = nsp_logits.argmax(-1) == rows["nsp_labels"]
    return {
        "mlm_accuracy": float((hits * weights).sum() / weights.sum()),
        "mlm_loss": float(-(target * weights).sum() / weights.sum()),
        "nsp_accuracy": float((nsp_hits * nsp_weights).sum() / max(nsp_weights.sum(), 1.0)),
        "nsp_loss": float(-(nsp_target * nsp_weights).sum() / max(nsp_weights.sum(), 1.0)),
    }


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


def time_embedding(embed, sentences: list, batch_size: int, repeats: int) -> tuple[np.ndarray, list[float]]:
    """(embeddings of `sentences`, sentences/s of each of `repeats` passes), `batch_size` at a
    time; `embed` maps texts to an array. Both sides of the inference part time this way.

    >>> embeddings, rates = time_embedding(lambda texts: np.ones((len(texts), 4)), ["a", "b", "c"], 2, repeats=2)
    >>> embeddings.shape, len(rates)
    ((3, 4), 2)
    """
    embeddings = np.concatenate([embed(sentences[i:i + batch_size]) for i in range(0, len(sentences), batch_size)])
    return embeddings, time_batches(embed, sentences, batch_size, repeats)
