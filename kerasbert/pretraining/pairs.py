"""Next-sentence-prediction pairs cut from tokenized documents.

Follows google-research/bert `create_instances_from_document`: sentences of one
document are gathered into a chunk of about `max_num_tokens`, split at a random
sentence boundary into A and B. Half the time B is replaced by sentences from a
*different* document (label 0, "random"); otherwise B is the true continuation
(label 1). A pair longer than the budget is trimmed from the longer side, at a
random end, so that neither segment is favoured.

Documents with a single sentence cannot give a true continuation; they are packed
into single-segment, MLM-only examples with `nsp_weight` 0, so they teach the
masked LM without skewing the NSP labels.

Example:
    >>> docs = [[[5, 6], [7, 8]], [[9, 10, 11], [12]]]  # 2 documents of token ids
    >>> pairs = build_pairs(docs, max_sequence_length=16, rng=np.random.default_rng(0))
    >>> pairs[0].keys()
    dict_keys(['segment_a', 'segment_b', 'nsp_label', 'nsp_weight', 'document'])
"""

from __future__ import annotations

import numpy as np

from kerasbert.errors import DataError

TokenIds = list[int]


def _trim_pair(a: TokenIds, b: TokenIds, max_num_tokens: int, rng: np.random.Generator) -> None:
    """Trims the longer segment, one token at a time from a random end, in place."""
    while len(a) + len(b) > max_num_tokens:
        longer = a if len(a) > len(b) else b
        if rng.random() < 0.5:
            del longer[0]
        else:
            longer.pop()


def _random_segment(documents, pool: list[int], exclude: int, target: int,
                    rng: np.random.Generator) -> TokenIds:
    """Sentences from a random other document of `pool`, starting at a random sentence.

    The pool holds only the multi-sentence documents, the same kind the true
    continuations come from: otherwise a negative B that is, say, a lone task
    sentence gives the label away by its style, and NSP learns nothing that transfers.
    """
    other = int(rng.integers(len(pool) - 1))
    other += other >= exclude  # `exclude` is the current document's place in the pool
    doc = documents[pool[other]]
    start = int(rng.integers(len(doc)))
    segment: TokenIds = []
    for sentence in doc[start:]:
        segment.extend(sentence)
        if len(segment) >= target:
            break
    return segment


def _pairs_from_document(documents, index, pool, place, max_num_tokens, short_seq_prob, rng):
    """Pairs cut from documents[index]; random next segments come from `pool` (which holds
    `index` at `place`)."""
    doc = documents[index]
    target = max_num_tokens
    if rng.random() < short_seq_prob:
        target = int(rng.integers(2, max_num_tokens + 1))
    examples, chunk, chunk_len, i = [], [], 0, 0
    # Draw the label first: a true continuation needs >= 2 sentences in the chunk,
    # so such a chunk keeps growing instead of silently turning into a negative.
    is_random = rng.random() < 0.5
    while i < len(doc):
        chunk.append(doc[i])
        chunk_len += len(doc[i])
        last = i == len(doc) - 1
        if last or (chunk_len >= target and (is_random or len(chunk) >= 2)):
            if len(chunk) == 1 and not is_random:
                break  # a lone last sentence cannot have a true next one
            a_end = int(rng.integers(1, len(chunk))) if len(chunk) >= 2 else 1
            segment_a = [t for s in chunk[:a_end] for t in s]
            if is_random:
                label = 0
                segment_b = _random_segment(documents, pool, place, target - len(segment_a), rng)
                # The unused tail of the chunk goes back for the next pair.
                i -= len(chunk) - a_end
            else:
                label = 1
                segment_b = [t for s in chunk[a_end:] for t in s]
            _trim_pair(segment_a, segment_b, max_num_tokens, rng)
            if segment_a and segment_b:
                examples.append(dict(segment_a=segment_a, segment_b=segment_b,
                                     nsp_label=label, nsp_weight=1.0, document=index))
            chunk, chunk_len = [], 0
            is_random = rng.random() < 0.5
            target = max_num_tokens
            if rng.random() < short_seq_prob:
                target = int(rng.integers(2, max_num_tokens + 1))
        i += 1
    return examples


def pack_single_segments(documents, max_num_tokens: int, document_ids=None) -> list[dict]:
    """Greedily joins consecutive sentences into single-segment MLM-only examples."""
    examples, segment, source = [], [], -1
    for index, doc in enumerate(documents):
        for sentence in doc:
            sentence = sentence[:max_num_tokens]
            if segment and len(segment) + len(sentence) > max_num_tokens:
                examples.append(dict(segment_a=segment, segment_b=[], nsp_label=0,
                                     nsp_weight=0.0, document=source))
                segment = []
            if not segment:
                source = index if document_ids is None else document_ids[index]
            segment = segment + sentence
    if segment:
        examples.append(dict(segment_a=segment, segment_b=[], nsp_label=0,
                             nsp_weight=0.0, document=source))
    return examples


def negative_pools(multi: list[int], sources) -> dict[int, tuple[list[int], int]]:
    """For each multi-sentence document: the documents its random next segments come from
    (those of its own source, or corpus, if the source has another one, else all of them),
    and its own place in that pool (the place `_random_segment` skips).

    Drawing across sources lets NSP learn "same corpus?" (a Wikipedia A with a movie-review
    B) instead of coherence, and that shortcut is worthless on held-out text of one source.
    """
    everyone = {index: (multi, place) for place, index in enumerate(multi)}
    if sources is None:
        return everyone
    by_source: dict = {}
    place_in_source = {}
    for index in multi:
        pool = by_source.setdefault(sources[index], [])
        place_in_source[index] = len(pool)
        pool.append(index)
    return {index: (by_source[sources[index]], place_in_source[index])
            if len(by_source[sources[index]]) >= 2 else everyone[index] for index in multi}


def _nsp_examples(documents, sources, max_sequence_length, short_seq_prob, dupe_factor, rng):
    multi = [i for i, doc in enumerate(documents) if len(doc) >= 2]
    single = [i for i, doc in enumerate(documents) if len(doc) == 1]
    if len(multi) == 1:
        raise DataError("NSP needs at least 2 multi-sentence documents: one to cut pairs "
                        "from, another to draw random next segments from.")
    pools = negative_pools(multi, sources)
    examples = []
    for _ in range(dupe_factor):
        for index in multi:
            pool, place = pools[index]
            examples.extend(_pairs_from_document(documents, index, pool, place,
                                                 max_sequence_length - 3, short_seq_prob, rng))
    if single:
        examples.extend(pack_single_segments([documents[i] for i in single],
                                             max_sequence_length - 2, document_ids=single))
    return examples


def build_pairs(documents, max_sequence_length: int, rng: np.random.Generator,
                nsp: bool = True, short_seq_prob: float = 0.1, dupe_factor: int = 1,
                sources: list | None = None) -> list[dict]:
    """Examples from tokenized documents (each a list of sentences of token ids).

    With `nsp`, multi-sentence documents give A/B pairs (labels ~50/50) and
    single-sentence documents give MLM-only examples; without `nsp`, all text is
    packed into single segments. `[CLS]` and the `[SEP]`s are added later by the
    packer, so the budget here is `max_sequence_length - 3` (or `- 2`). `sources`
    (one label per document, e.g. its corpus name) keeps random next segments within
    the source of A (see `negative_pools`).
    """
    kept = [i for i, doc in enumerate(documents) if any(doc)]
    sources = None if sources is None else [sources[i] for i in kept]
    documents = [[s for s in documents[i] if s] for i in kept]
    if not documents:
        raise DataError("build_pairs needs at least one non-empty document. Received: 0")
    if nsp:
        examples = _nsp_examples(documents, sources, max_sequence_length, short_seq_prob,
                                 dupe_factor, rng)
    else:
        examples = pack_single_segments(documents, max_sequence_length - 2)
    # Built in corpus order; shuffled here (as google-research/bert does) so that any
    # slice, and any window of a tf.data shuffle buffer, mixes sources and NSP/MLM-only rows.
    rng.shuffle(examples)
    return examples
