"""CoNLL-2003 dev entities for `benchmarks.inference` (`--tasks ner`): raw text (a sentence's words
joined by spaces) to entities, every system as for the classifier, on one MiniLM tagger fine-tuned by
kerasbert at a tiny budget (`finetune_ner_tiny` on all 14,041 training sentences, --ner_train_steps
at batch 32; words split at punctuation too, as transformers' pipeline splits them). kerasbert answers
with its `entities` signature; transformers with `pipeline("token-classification",
aggregation_strategy="first")`; ONNX Runtime with the fast tokenizer and the same grouping
(benchmarks/peer_onnx.py `entities_of`). Each system's entities ([type, start, end], character
offsets) become tags of the CoNLL words they cover (`word_tags`), scored against the dev tags with
kerasbert's conlleval (entity F1, precision, recall) over all 3,250 sentences.

Example:
    >>> word_tags(["EU", "rejects", "German", "call"], [["ORG", 0, 2], ["MISC", 11, 17]])
    ['B-ORG', 'O', 'B-MISC', 'O']
"""

from __future__ import annotations

import os
from typing import Callable

from benchmarks.inference import Job


def word_tags(words: list[str], entities: list[list]) -> list[str]:
    """The IOB2 tags of `words` that `entities` ([type, start, end) in " ".join(words)) give: each
    word an entity's characters overlap is tagged with its type, B- for its first word; others O."""
    tags, starts, position = ["O"] * len(words), [], 0
    for word in words:
        starts.append(position)
        position += len(word) + 1
    for kind, start, end in entities:
        covered = [i for i, (first, word) in enumerate(zip(starts, words)) if first < end and first + len(word) > start]
        for i in covered:
            tags[i] = ("B-" if i == covered[0] else "I-") + kind
    return tags


def text_of(value) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def answers(outputs: dict) -> list[list]:
    """The `entities` signature's outputs (in process or served) as each text's [type, start, end]."""
    return [[[text_of(kind), int(start), int(end)]
             for kind, start, end in list(zip(outputs["entity_type"][row], outputs["entity_start"][row],
                                              outputs["entity_end"][row]))[:int(count)]]
            for row, count in enumerate(outputs["num_entities"])]


def dev_sentences(run_dir: str, data_dir: str) -> tuple[list[str], Callable[[list], dict]]:
    """The CoNLL-2003 dev sentences as texts, and the entity scores of answers for them."""
    from kerasbert.config import FinetuneConfig, load_config
    from kerasbert.families.tagging.conll import read_conll
    from kerasbert.families.tagging.conlleval import entity_scores

    spec = load_config(FinetuneConfig, os.path.join(run_dir, "config.json"), []).tasks["ner"]
    sentences = read_conll(os.path.join(data_dir, spec.dev_file)).sentences

    def score(found: list) -> dict:
        scores = entity_scores([s.tags for s in sentences],
                               [word_tags(s.words, entities) for s, entities in zip(sentences, found)])
        return {"entity_f1": scores.f1, "precision": scores.precision, "recall": scores.recall}
    return [" ".join(s.words) for s in sentences], score


ENTITIES = Job("ner", "tags", "entities", ("--config", "finetune_ner_tiny", "--set", "data.max_train_examples=0",
                                           "--set", "tasks.ner.words=punctuation"),
               300, "entities", answers, dev_sentences)
