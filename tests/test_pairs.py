"""NSP pair construction: balance, negatives from other documents, lengths."""

import numpy as np

from kerasbert.pretraining.pairs import build_pairs


def documents(num_documents=60, sentences=8, seed=0):
    """Token ids encode (document, sentence, position): doc d uses ids in [1000*d, 1000*d+999]."""
    rng = np.random.default_rng(seed)
    return [[[1000 * d + 10 * s + k for k in range(rng.integers(3, 10))] for s in range(sentences)]
            for d in range(num_documents)]


def doc_of(token):
    return token // 1000


def test_labels_balanced_and_negatives_from_other_documents():
    pairs = build_pairs(documents(), max_sequence_length=48, rng=np.random.default_rng(1), dupe_factor=3)
    labels = np.array([p["nsp_label"] for p in pairs])
    assert len(pairs) > 300
    assert 0.45 <= labels.mean() <= 0.55, labels.mean()
    for p in pairs:
        a_docs = {doc_of(t) for t in p["segment_a"]}
        b_docs = {doc_of(t) for t in p["segment_b"]}
        assert a_docs == {p["document"]}
        if p["nsp_label"] == 1:
            assert b_docs == a_docs
            # True next: B continues A in the document's order.
            assert min(p["segment_b"]) > max(p["segment_a"])
        else:
            assert len(b_docs) == 1 and b_docs != a_docs


def test_negatives_stay_within_the_source_of_segment_a():
    """Else NSP learns "same corpus?", which tells nothing on held-out text of one corpus."""
    docs = documents(num_documents=40)
    sources = ["wiki"] * 4 + ["reviews"] * 35 + ["lonely"]  # "lonely" has one document only
    pairs = build_pairs(docs, 48, np.random.default_rng(3), dupe_factor=4, sources=sources)
    negatives = [p for p in pairs if p["nsp_label"] == 0]
    assert len(negatives) > 100
    for p in negatives:
        a_doc, b_doc = p["document"], doc_of(p["segment_b"][0])
        if sources[a_doc] != "lonely":
            assert sources[b_doc] == sources[a_doc] and b_doc != a_doc
    # Without sources, a wiki A mostly meets review B's (35 of the 39 other documents).
    unlabelled = [p for p in build_pairs(docs, 48, np.random.default_rng(3), dupe_factor=4)
                  if p["nsp_label"] == 0 and p["document"] < 4]
    assert np.mean([doc_of(p["segment_b"][0]) >= 4 for p in unlabelled]) > 0.7


def test_negatives_never_come_from_single_sentence_documents():
    """Else a lone task sentence as B would give the label away by its style."""
    singles = [[[50000 + i, 50001 + i]] for i in range(0, 2000, 2)]
    pairs = build_pairs(documents(num_documents=10) + singles, 48, np.random.default_rng(2))
    negatives = [p for p in pairs if p["nsp_label"] == 0 and p["nsp_weight"] > 0]
    assert negatives
    assert all(max(p["segment_b"]) < 50000 for p in negatives)


def test_pairs_fit_the_sequence_budget():
    long_docs = [[list(range(1000 * d + 100 * s, 1000 * d + 100 * s + 60)) for s in range(4)]
                 for d in range(10)]
    for seq in (16, 32, 128):
        for p in build_pairs(long_docs, seq, np.random.default_rng(0)):
            assert len(p["segment_a"]) + len(p["segment_b"]) <= seq - 3  # [CLS], 2x [SEP]
            assert p["segment_a"] and p["segment_b"]


def test_single_sentence_documents_become_mlm_only_examples():
    docs = documents(num_documents=4) + [[[9000 + i, 9001 + i]] for i in range(0, 40, 2)]
    pairs = build_pairs(docs, 16, np.random.default_rng(0))
    single = [p for p in pairs if p["nsp_weight"] == 0]
    assert single and all(p["segment_b"] == [] for p in single)
    assert sum(len(p["segment_a"]) for p in single) == 40  # all their text, packed
    assert all(len(p["segment_a"]) <= 14 for p in single)


def test_without_nsp_all_text_is_packed_into_single_segments():
    docs = documents(num_documents=5)
    pairs = build_pairs(docs, 32, np.random.default_rng(0), nsp=False)
    assert all(p["nsp_weight"] == 0 and not p["segment_b"] for p in pairs)
    packed = [t for p in pairs for t in p["segment_a"]]
    assert sorted(packed) == sorted(t for d in docs for s in d for t in s)


def test_examples_come_out_shuffled_across_corpora_and_kinds():
    """Built corpus by corpus, they must not reach tf.data in that order: a shuffle buffer
    smaller than the data would then feed long runs of one corpus, or of MLM-only rows."""
    docs = documents(num_documents=40) + [[[90000 + i]] for i in range(400)]
    sources = ["wiki"] * 20 + ["reviews"] * 20 + ["task"] * 400
    pairs = build_pairs(docs, 32, np.random.default_rng(0), dupe_factor=2, sources=sources)
    first_tenth = pairs[: len(pairs) // 10]
    kinds = {("mlm-only" if p["nsp_weight"] == 0 else sources[p["document"]]) for p in first_tenth}
    assert kinds == {"wiki", "reviews", "mlm-only"}
    again = build_pairs(docs, 32, np.random.default_rng(0), dupe_factor=2, sources=sources)
    assert again == pairs  # seeded: the same order every time
