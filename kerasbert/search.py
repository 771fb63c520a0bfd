"""Semantic search with sentence embeddings: each sentence is embedded once (Sentence-BERT).

A cross-encoder must run BERT on every (query, sentence) pair; a bi-encoder embeds the
corpus once, caches it, and answers a query with one more embedding and a matrix
product. Embeddings come from a fine-tuning run (`model.embed`) or from an exported
SavedModel's `embed` signature; both are L2-normalised, so dot products are cosines.

Search here is exact, right for corpora up to `vector_index.EXACT_SEARCH_LIMIT` (100,000)
sentences; past that, an index takes over: embed the corpus on Beam
(pipelines.batch_predict), index it (pipelines.build_index, `kerasbert.vector_index`), and
search it with `pipelines.search --index`.

Example:
    >>> embedder = make_embedder(run_dir)  # a run folder (e.g. runs/finetune) or an exported version
    >>> corpus = read_sentences(sentences_file)
    >>> vectors = embed_corpus(embedder, corpus, cache_dir=f"{tmp_path}/search_cache", progress=False)
    >>> vectors.shape
    (4, 8)
    >>> indices, cosines = nearest(embedder(["the cat sat on the mat ."]), vectors, top_k=3)  # best first
    >>> indices[:, 0], cosines.shape  # the sentence itself first
    (array([0]), (1, 3))
"""

from __future__ import annotations

import hashlib
import os
import tempfile

import numpy as np
import tensorflow as tf

from kerasbert.errors import DataError
from kerasbert.vector_index import normalized


def _file_digest(*paths: str) -> str:
    digest = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()


def _batches(sentences: list[str], batch_size: int, progress: bool):
    import keras

    bar = keras.utils.Progbar(len(sentences), unit_name="sentence") if progress else None
    for start in range(0, len(sentences), batch_size):
        batch = sentences[start:start + batch_size]
        yield tf.constant(batch)
        if bar is not None:
            bar.add(len(batch))


class KerasEmbedder:
    """Sentence embeddings of a pipelines.finetune output folder (its `embed` path)."""

    def __init__(self, model_dir: str, batch_size: int = 64):
        from kerasbert.finetuning.load import load_finetuned

        _, self.model, self.preprocessor = load_finetuned(model_dir)
        self.batch_size = batch_size
        self.fingerprint = _file_digest(os.path.join(model_dir, "model.keras"))
        self._embed = tf.function(lambda text: self.model.embed(self.preprocessor.pack(text)),
                                  input_signature=[tf.TensorSpec([None], tf.string)])

    def __call__(self, sentences: list[str], progress: bool = False) -> np.ndarray:
        parts = [self._embed(batch).numpy() for batch in _batches(sentences, self.batch_size, progress)]
        return normalized(np.concatenate(parts))


class SavedModelEmbedder:
    """Sentence embeddings from an exported SavedModel's `embed` signature, or another that
    takes `text` and returns `embedding` (an embedding task's, named after it)."""

    def __init__(self, path: str, batch_size: int = 64, signature: str = "embed"):
        import tensorflow_text  # noqa: F401  the signature's tokenizer ops

        signatures = tf.saved_model.load(path).signatures
        if signature not in signatures or "embedding" not in signatures[signature].structured_outputs:
            found = sorted(name for name in signatures if "embedding" in signatures[name].structured_outputs)
            raise DataError(f"{path}: no signature {signature!r} with an `embedding` output; these have one: {found}")
        self.signature = signatures[signature]
        self.batch_size = batch_size
        self.fingerprint = _file_digest(os.path.join(path, "saved_model.pb"),
                                        os.path.join(path, "variables", "variables.index")) + signature

    def __call__(self, sentences: list[str], progress: bool = False) -> np.ndarray:
        parts = [self.signature(text=batch)["embedding"].numpy()
                 for batch in _batches(sentences, self.batch_size, progress)]
        return normalized(np.concatenate(parts))


def make_embedder(path: str, batch_size: int = 64, signature: str = "embed"):
    """A SavedModel version folder (has saved_model.pb; its `signature`) or a fine-tuning output
    folder (its model's sentence embedding, which every text -> embedding signature of its
    export serves)."""
    if os.path.exists(os.path.join(path, "saved_model.pb")):
        return SavedModelEmbedder(path, batch_size, signature)
    return KerasEmbedder(path, batch_size)


def read_sentences(path: str) -> list[str]:
    """One sentence per line; blank lines are skipped."""
    from kerasbert.data.corpus import read_utf8_lines

    sentences = [line.strip() for line in read_utf8_lines(path) if line.strip()]
    if not sentences:
        raise DataError(f"{path}: no sentences (expected one per line)")
    return sentences


def embed_corpus(embedder, sentences: list[str], cache_dir: str | None = None,
                 progress: bool = True) -> np.ndarray:
    """Embeddings of `sentences`, read from / written to `cache_dir` keyed by model and text."""
    if not cache_dir:
        return embedder(sentences, progress)
    key = hashlib.sha256((embedder.fingerprint + "\n" + "\n".join(sentences)).encode("utf-8")).hexdigest()
    path = os.path.join(cache_dir, f"{key[:24]}.npy")
    if os.path.exists(path):
        return np.load(path)
    vectors = embedder(sentences, progress)
    os.makedirs(cache_dir, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=cache_dir, suffix=".npy.tmp", delete=False) as f:
        np.save(f, vectors)
    os.replace(f.name, path)  # a crash never leaves a half-written cache entry
    return vectors


def nearest(queries: np.ndarray, corpus: np.ndarray, top_k: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """Indices and cosines of the `top_k` corpus rows nearest each query row, best first."""
    scores = queries @ corpus.T  # (queries, corpus)
    k = min(top_k, corpus.shape[0])
    top = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    order = np.argsort(-np.take_along_axis(scores, top, axis=1), axis=1)
    indices = np.take_along_axis(top, order, axis=1)
    return indices, np.take_along_axis(scores, indices, axis=1)


def most_similar_pair(vectors: np.ndarray, block: int = 1024) -> tuple[int, int, float]:
    """(i, j, cosine) with i < j of the most similar pair of rows, in blocks of rows."""
    best = (-1, -1, -np.inf)
    for start in range(0, len(vectors), block):
        scores = vectors[start:start + block] @ vectors.T  # (block, n)
        rows = np.arange(scores.shape[0])
        scores[rows[:, None] + start >= np.arange(len(vectors))[None, :]] = -np.inf  # keep j > i only
        flat = int(np.argmax(scores))
        i, j = divmod(flat, scores.shape[1])
        if scores[i, j] > best[2]:
            best = (start + i, j, float(scores[i, j]))
    return best
