"""NSP examples cut document by document, each document with its own seeded generator,
so that any split of a corpus across workers gives the same examples per document.

`build_pairs` draws one random stream over the whole corpus, in order: the examples of a
document depend on every document before it, so only one process can make them. Here the
generator of document `i` of source `s` in dupe round `r` is `default_rng([seed, s, i, r])`;
random next segments come, as there, from the multi-sentence documents of the same source
(`negative_pools`), which every worker holds (a Beam side input). Single-sentence documents
are packed into MLM-only examples in (source, index) order. `make_examples` computes this in
one process; `kerasbert.pretraining.beam_data` computes the same on Apache Beam.

Example:
    >>> documents = {(0, 0): [[5, 6], [7, 8]], (0, 1): [[9, 10, 11], [12]], (0, 2): [[13]]}
    >>> examples = make_examples(documents, {key: "corpus" for key in documents}, seed=1234,
    ...                          max_sequence_length=16)
    >>> sorted({e["document"] for e in examples})
    ['0:0', '0:1', '0:2']
"""

from __future__ import annotations

import numpy as np

from kerasbert.errors import DataError
from kerasbert.pretraining.pairs import _pairs_from_document, negative_pools, pack_single_segments

DocumentKey = tuple[int, int]  # (source's place in data.sources, document's place in that source)


def document_name(key: DocumentKey) -> str:
    return f"{key[0]}:{key[1]}"


def kept_sentences(document: list) -> list:
    return [sentence for sentence in document if sentence]


def pools_of(documents: dict, sources: dict) -> dict:
    """For each multi-sentence document: its pool of negative documents and its place there."""
    multi = sorted(key for key, document in documents.items() if len(document) >= 2)
    if len(multi) == 1:
        raise DataError("NSP needs at least 2 multi-sentence documents: one to cut pairs "
                        "from, another to draw random next segments from.")
    return negative_pools(multi, sources)


def pairs_of_document(documents: dict, key: DocumentKey, pools: dict, seed: int, max_sequence_length: int,
                      short_seq_prob: float = 0.1, dupe_factor: int = 1) -> list[dict]:
    """The NSP examples of the multi-sentence document `key`, over `dupe_factor` rounds."""
    pool, place = pools[key]
    examples = []
    for round_ in range(dupe_factor):
        rng = np.random.default_rng([seed, key[0], key[1], round_])
        for example in _pairs_from_document(documents, key, pool, place, max_sequence_length - 3,
                                            short_seq_prob, rng):
            examples.append({**example, "document": document_name(key)})
    return examples


def single_examples(documents: dict, max_sequence_length: int) -> list[dict]:
    """The single-sentence documents packed into MLM-only examples, in key order."""
    keys = sorted(key for key, document in documents.items() if len(document) == 1)
    examples = pack_single_segments([documents[key] for key in keys], max_sequence_length - 2,
                                    document_ids=[document_name(key) for key in keys])
    return examples


def make_examples(documents: dict, sources: dict, seed: int, max_sequence_length: int,
                  short_seq_prob: float = 0.1, dupe_factor: int = 1) -> list[dict]:
    """Every example of `documents` ({key: tokenized sentences}, empty sentences dropped),
    document by document, in one process."""
    documents = {key: kept for key, doc in documents.items() if (kept := kept_sentences(doc))}
    pools = pools_of(documents, sources)
    examples = [example for key in sorted(pools)
                for example in pairs_of_document(documents, key, pools, seed, max_sequence_length,
                                                 short_seq_prob, dupe_factor)]
    return examples + single_examples(documents, max_sequence_length)
