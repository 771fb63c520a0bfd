"""Approximate nearest-neighbour search over sentence embeddings: ScaNN or FAISS.

Vectors are L2-normalised, so inner products are cosines. An index folder holds the index
(`scann/` or `faiss.index`), `rows.jsonl` (the id and text of every vector, in index order)
and `index.json` (backend, size, parameters). Exact search (`kerasbert.search.nearest`)
stays the answer for small corpora: below EXACT_SEARCH_LIMIT vectors its matrix product
costs milliseconds, and it is never wrong.

Backends (ScaNN is the default; `make bench-batch` measures it against exact search at 1M
vectors, docs/benchmarks.md):
- "scann": a k-means tree (about sqrt(N) leaves, a twentieth searched, at least 16),
  anisotropic 4-bit product quantization scoring, the best 200 rescored exactly (reorder).
- "faiss": an inverted file (about 4 sqrt(N) lists, 1/32 searched, at least 16), exact inner
  products within the lists searched (`IndexIVFFlat`).
A small corpus, split into SEARCHED_WHOLE lists or leaves or fewer (up to about 1,000
vectors), has all of them searched: its exact top hits (FAISS), or all but what ScaNN's
quantized scores push out of the 200 rescored.

Example:
    >>> import tempfile
    >>> vectors = np.random.default_rng(0).normal(size=(2000, 16))
    >>> index = build_index(vectors, backend="faiss")
    >>> rows, cosines = index.search(vectors[[7, 9]], k=10)  # best first
    >>> rows[:, 0].tolist()
    [7, 9]
    >>> folder = os.path.join(tempfile.mkdtemp(), "index")
    >>> save_index(index, [f"s{i}" for i in range(2000)], [f"sentence {i}" for i in range(2000)], folder)
    >>> index, rows = load_index(folder)
    >>> rows[7]
    {'id': 's7', 'text': 'sentence 7'}
"""

from __future__ import annotations

import json
import math
import os
import shutil

import numpy as np

from kerasbert.durable import publish, write_json
from kerasbert.errors import ConfigError

BACKENDS = ("scann", "faiss")
EXACT_SEARCH_LIMIT = 100_000  # vectors; beyond it, pipelines.search asks for an index
SEARCHED_WHOLE = 32  # lists or leaves: an index with no more searches them all


def parts_to_search(parts: int, fraction: int) -> int:
    """How many of an index's `parts` (lists, leaves) a query searches: 1/`fraction`, at least
    16, and all of them up to SEARCHED_WHOLE (a 300-vector corpus searched in 1 of its 7 FAISS
    lists missed half of its exact top 10).

    >>> parts_to_search(7, 32), parts_to_search(100, 20), parts_to_search(4000, 32)
    (7, 16, 125)
    """
    return parts if parts <= SEARCHED_WHOLE else min(parts, max(16, math.ceil(parts / fraction)))


def normalized(vectors) -> np.ndarray:
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    return vectors / np.maximum(np.linalg.norm(vectors, axis=-1, keepdims=True), 1e-12)


class ScannIndex:
    backend = "scann"

    def __init__(self, searcher, params: dict):
        self.searcher, self.params = searcher, params

    @classmethod
    def build(cls, vectors: np.ndarray, leaves: int | None = None, leaves_to_search: int | None = None,
              reorder: int = 200, training_sample: int = 250_000) -> "ScannIndex":
        from kerasbert.compat.scann import scann_pybind

        count = len(vectors)
        leaves = leaves or max(1, int(round(math.sqrt(count))))
        leaves_to_search = leaves_to_search or parts_to_search(leaves, 20)
        builder = scann_pybind().builder(vectors, 10, "dot_product")
        if leaves > 1:
            builder = builder.tree(num_leaves=leaves, num_leaves_to_search=leaves_to_search,
                                   training_sample_size=min(count, training_sample))
        searcher = builder.score_ah(2, anisotropic_quantization_threshold=0.2).reorder(reorder).build()
        return cls(searcher, {"leaves": leaves, "leaves_to_search": leaves_to_search, "reorder": reorder})

    def search(self, queries: np.ndarray, k: int = 10) -> tuple[np.ndarray, np.ndarray]:
        rows, scores = self.searcher.search_batched(queries, final_num_neighbors=k)
        return rows.astype(np.int64), scores

    def save(self, folder: str) -> None:
        os.makedirs(os.path.join(folder, "scann"))
        self.searcher.serialize(os.path.join(folder, "scann"), relative_path=True)  # the folder moves

    @classmethod
    def load(cls, folder: str, params: dict) -> "ScannIndex":
        from kerasbert.compat.scann import scann_pybind

        return cls(scann_pybind().load_searcher(os.path.join(folder, "scann")), params)


class FaissIndex:
    backend = "faiss"

    def __init__(self, index, params: dict):
        self.index, self.params = index, params

    @classmethod
    def build(cls, vectors: np.ndarray, lists: int | None = None, lists_to_search: int | None = None) -> "FaissIndex":
        import faiss

        count, dim = vectors.shape
        lists = lists or max(1, min(count // 39, int(round(4 * math.sqrt(count)))))  # >= 39 points a list
        lists_to_search = lists_to_search or parts_to_search(lists, 32)
        quantizer = faiss.IndexFlatIP(dim)
        index = faiss.IndexIVFFlat(quantizer, dim, lists, faiss.METRIC_INNER_PRODUCT)
        sample = min(count, 64 * lists)  # k-means on 64 points a list, as FAISS's own guidance has it
        picked = np.random.default_rng(0).choice(count, size=sample, replace=False) if sample < count else slice(None)
        index.train(vectors[picked])
        index.add(vectors)
        index.nprobe = lists_to_search
        return cls(index, {"lists": lists, "lists_to_search": lists_to_search})

    def search(self, queries: np.ndarray, k: int = 10) -> tuple[np.ndarray, np.ndarray]:
        scores, rows = self.index.search(queries, k)
        return rows.astype(np.int64), scores

    def save(self, folder: str) -> None:
        import faiss

        faiss.write_index(self.index, os.path.join(folder, "faiss.index"))

    @classmethod
    def load(cls, folder: str, params: dict) -> "FaissIndex":
        import faiss

        index = faiss.read_index(os.path.join(folder, "faiss.index"))
        index.nprobe = params["lists_to_search"]
        return cls(index, params)


_CLASSES = {"scann": ScannIndex, "faiss": FaissIndex}


def build_index(vectors, backend: str = "scann", **params):
    """An index of the L2-normalised `vectors` with `backend`'s defaults for their number
    (or `params`: leaves, leaves_to_search, reorder for ScaNN; lists, lists_to_search for FAISS)."""
    if backend not in _CLASSES:
        raise ConfigError(f"backend must be one of {BACKENDS}. Received: {backend!r}")
    return _CLASSES[backend].build(normalized(vectors), **params)


def save_index(index, ids: list[str], texts: list[str], folder: str, overwrite: bool = False) -> None:
    """Writes `index` with the id and text of each vector into `folder`, whole or not at all."""
    if os.path.exists(folder) and not overwrite:
        raise FileExistsError(f"{folder} exists; pass --overwrite to replace it")
    partial = f"{folder.rstrip(os.sep)}.partial-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    os.makedirs(partial)
    index.save(partial)
    with open(os.path.join(partial, "rows.jsonl"), "w", encoding="utf-8") as f:
        for row_id, text in zip(ids, texts):
            f.write(json.dumps({"id": row_id, "text": text}, ensure_ascii=False) + "\n")
    write_json(os.path.join(partial, "index.json"), {"backend": index.backend, "vectors": len(ids),
                                                     "params": index.params})
    if os.path.exists(folder):
        shutil.rmtree(folder)
    publish(partial, folder)


def load_index(folder: str):
    """(index, rows) of an index folder; rows[i] is {"id", "text"} of vector i."""
    meta_path = os.path.join(folder, "index.json")
    if not os.path.isfile(meta_path):
        raise FileNotFoundError(f"{folder}: not an index folder (no index.json; pipelines.build_index writes one)")
    with open(meta_path, encoding="utf-8") as f:
        meta = json.load(f)
    with open(os.path.join(folder, "rows.jsonl"), encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    return _CLASSES[meta["backend"]].load(folder, meta["params"]), rows
