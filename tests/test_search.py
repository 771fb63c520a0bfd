"""Semantic search: nearest neighbours, the most similar pair, the embedding cache, the CLI."""

import json

import numpy as np
import pytest

from conftest import run_main
from kerasbert.search import embed_corpus, most_similar_pair, nearest


def unit_rows(n, dim=6, seed=0):
    vectors = np.random.default_rng(seed).normal(size=(n, dim)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def test_nearest_matches_a_full_sort():
    corpus, queries = unit_rows(50), unit_rows(3, seed=1)
    indices, scores = nearest(queries, corpus, top_k=4)
    full = queries @ corpus.T
    np.testing.assert_array_equal(indices, np.argsort(-full, axis=1)[:, :4])
    np.testing.assert_allclose(scores, np.sort(full, axis=1)[:, ::-1][:, :4], rtol=1e-6)
    assert nearest(queries, corpus[:2], top_k=5)[0].shape == (3, 2)  # k capped at the corpus size


@pytest.mark.parametrize("block", [7, 1024])
def test_most_similar_pair_is_the_brute_force_maximum(block):
    vectors = unit_rows(40)
    vectors[31] = vectors[5] * 0.999 + vectors[6] * 0.001  # a planted near-duplicate
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    i, j, score = most_similar_pair(vectors, block=block)
    full = vectors @ vectors.T
    np.fill_diagonal(full, -np.inf)
    assert (i, j) == (5, 31) and score == pytest.approx(full.max(), rel=1e-6)


class CountingEmbedder:
    fingerprint = "model-a"

    def __init__(self):
        self.calls = 0

    def __call__(self, sentences, progress=False):
        self.calls += 1
        return unit_rows(len(sentences), seed=len(sentences))


def test_corpus_embeddings_are_cached_by_model_and_text(tmp_path):
    embedder = CountingEmbedder()
    first = embed_corpus(embedder, ["a", "b", "c"], str(tmp_path))
    again = embed_corpus(embedder, ["a", "b", "c"], str(tmp_path))
    assert embedder.calls == 1 and np.array_equal(first, again)
    embed_corpus(embedder, ["a", "b", "d"], str(tmp_path))  # other text: embedded anew
    embedder.fingerprint = "model-b"
    embed_corpus(embedder, ["a", "b", "c"], str(tmp_path))  # other weights: embedded anew
    assert embedder.calls == 3 and len(list(tmp_path.glob("*.npy"))) == 3
    assert not list(tmp_path.glob("*.tmp"))


def test_search_cli_on_a_finetune_run_and_on_its_export(tmp_path, capsys):
    from kerasbert.export import export_saved_model
    from helpers import tiny_model_dir

    tiny_model_dir(str(tmp_path / "run"), "bi")
    export = export_saved_model(str(tmp_path / "run"), str(tmp_path / "exports"))
    corpus = tmp_path / "corpus.txt"
    sentences = ["the cat sat on the mat .", "dogs ran fast", "the dog sat", "cats ran on the mat"]
    corpus.write_text("\n".join(sentences) + "\n\n")
    answers = []
    for model_dir, cache in ((str(tmp_path / "run"), []), (export, ["--cache_dir", str(tmp_path / "cache")])):
        result = run_main(["pipelines.search", "--model_dir", model_dir, "--corpus", str(corpus),
                           "--query", "dogs ran fast", "--query", "the dog sat", "--top_k", "3"] + cache,
                          capsys, check=True)
        found = json.loads(result.stdout[result.stdout.index("["):])
        assert [q["results"][0]["text"] for q in found] == ["dogs ran fast", "the dog sat"]
        assert found[0]["results"][0]["cosine"] == pytest.approx(1.0, abs=1e-4)
        assert [len(q["results"]) for q in found] == [3, 3]
        answers.append(found)
    assert len(list((tmp_path / "run" / "search_cache").glob("*.npy"))) == 1
    assert len(list((tmp_path / "cache").glob("*.npy"))) == 1 and "search_cache" not in str(list(tmp_path.glob("exports/1/*")))
    # The Keras model and its SavedModel `embed` signature rank the corpus alike.
    assert [[r["text"] for r in q["results"]] for q in answers[0]] == \
           [[r["text"] for r in q["results"]] for q in answers[1]]
