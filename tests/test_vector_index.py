"""The approximate indexes find what exact search finds: recall@10 of at least 0.9 on a few
thousand clustered vectors, for both backends, with their default parameters, after a save
and a load; a saved index is whole or absent."""

import os

import numpy as np
import pytest

from kerasbert.search import nearest
from kerasbert.vector_index import build_index, load_index, normalized, save_index


def clustered(count, rng, centers):
    """Vectors around random centres (as sentence embeddings cluster by topic), L2-normalised."""
    noise = 0.6 * rng.normal(size=(count, centers.shape[1]))
    return normalized(centers[rng.integers(len(centers), size=count)] + noise)


@pytest.mark.parametrize("backend", ["scann", "faiss"])
def test_recall_at_10_against_exact_search(backend, tmp_path):
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(60, 64))
    vectors, queries = clustered(5000, rng, centers), clustered(300, rng, centers)
    ids = [f"corpus.txt:{i + 1}" for i in range(len(vectors))]
    save_index(build_index(vectors, backend), ids, [f"sentence {i}" for i in range(len(vectors))],
               str(tmp_path / "index"))
    index, rows = load_index(str(tmp_path / "index"))
    found, scores = index.search(queries, k=10)
    exact, exact_scores = nearest(queries, vectors, 10)
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(found, exact)])
    # ScaNN's k-means trains on several threads: its recall here moves with the machine's load
    # (0.976 alone, 0.942 once in a loaded suite); the 0.95 goal is judged at 1M vectors (bench-batch).
    assert recall >= 0.9, recall
    assert rows[found[0][0]] == {"id": f"corpus.txt:{found[0][0] + 1}", "text": f"sentence {found[0][0]}"}
    same = found[:, 0] == exact[:, 0]
    assert same.mean() >= 0.9  # the best hit, mostly; and where it is, its cosine is the exact one (rescored)
    np.testing.assert_allclose(scores[same, 0], exact_scores[same, 0], atol=1e-3)
    assert sorted(os.listdir(tmp_path)) == ["index"]  # nothing partial left beside it


def test_an_index_is_not_overwritten_unless_asked(tmp_path):
    vectors = normalized(np.random.default_rng(1).normal(size=(100, 8)))
    index = build_index(vectors, "faiss")
    save_index(index, [str(i) for i in range(100)], ["t"] * 100, str(tmp_path / "index"))
    with pytest.raises(FileExistsError, match="pass --overwrite"):
        save_index(index, [str(i) for i in range(100)], ["t"] * 100, str(tmp_path / "index"))
    save_index(index, [str(i) for i in range(100)], ["u"] * 100, str(tmp_path / "index"), overwrite=True)
    assert load_index(str(tmp_path / "index"))[1][0]["text"] == "u"


@pytest.mark.parametrize("backend", ["scann", "faiss"])
def test_a_small_corpus_gets_its_exact_top_hits(backend):
    rng = np.random.default_rng(1)
    vectors, queries = normalized(rng.normal(size=(300, 32))), normalized(rng.normal(size=(50, 32)))  # no clusters
    found, _ = build_index(vectors, backend).search(queries, k=10)
    exact, _ = nearest(queries, vectors, 10)
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(found, exact)])
    assert recall == 1.0 if backend == "faiss" else recall >= 0.99
