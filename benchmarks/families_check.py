"""A short real check of the tagging and span families on MiniLM: train a few steps on the
first examples of the training file, then score the first dev examples through the export
signatures (`entities` / `answer`), in memory. Not the benchmark of issue 50 (no peer, a
fraction of the data and steps): a check that the pieces learn together.

    python -m benchmarks.families_check --task ner --data_dir ../shared/data
    python -m benchmarks.families_check --task squad --data_dir ../shared/data

Prints one JSON line: the settings, training examples/s, the final loss and the dev scores.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import keras

from kerasbert.families import conlleval, conll, squad
from kerasbert.families.span_qa import SpanGraph, build_span_model, predict_answers, span_dataset, span_features, \
    span_loss
from kerasbert.families.span_qa_export import SpanSignatures
from kerasbert.families.tagging import (TaggingGraph, build_tagging_model, masked_tag_loss, predict_tags,
                                        tagging_dataset, tagging_features)
from kerasbert.families.tagging_export import TaggingSignatures
from kerasbert.models.encoder import load_encoder, minilm_checkpoint
from kerasbert.tokenization import load_tokenizer
from kerasbert.training.optim import WarmupLinearDecay


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", choices=("ner", "squad"), required=True)
    parser.add_argument("--data_dir", default="../shared/data")
    parser.add_argument("--train_examples", type=int, default=1600, help="the first N sentences / questions")
    parser.add_argument("--dev_examples", type=int, default=500, help="the first N dev sentences / questions")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--sequence_length", type=int, default=None, help="default: 128 (ner), 384 (squad)")
    parser.add_argument("--learning_rate", type=float, default=1e-4)
    parser.add_argument("--seed", type=int, default=1)
    return parser.parse_args(argv)


def train(model, loss, data, args) -> tuple[float, float]:
    """Fits `args.steps` steps; returns (training examples/s, last epoch's mean loss)."""
    schedule = WarmupLinearDecay(args.learning_rate, warmup_steps=args.steps // 10, total_steps=args.steps)
    model.compile(keras.optimizers.AdamW(schedule, weight_decay=0.01), loss=loss)
    data = data.repeat()
    model.fit(data, steps_per_epoch=1, epochs=1, verbose=0)  # traced once, outside the timing
    began = time.perf_counter()
    history = model.fit(data, steps_per_epoch=args.steps - 1, epochs=1, verbose=0).history["loss"]
    return (args.steps - 1) * args.batch_size / (time.perf_counter() - began), history[-1]


def main(argv=None) -> int:
    args = parse_args(argv)
    keras.utils.set_random_seed(args.seed)
    checkpoint = minilm_checkpoint()
    vocabulary = load_tokenizer(checkpoint).get_vocabulary()
    encoder = load_encoder(checkpoint)
    result = {key: value for key, value in vars(args).items()}
    if args.task == "ner":
        length = args.sequence_length or 128
        train_sentences = conll.read_conll(os.path.join(args.data_dir, "conll2003", "train.txt")).sentences
        dev = conll.read_conll(os.path.join(args.data_dir, "conll2003", "dev.txt")).sentences[:args.dev_examples]
        graph = TaggingGraph(vocabulary, conll.tag_names(train_sentences), length)
        features = tagging_features(graph, train_sentences[:args.train_examples])
        model = build_tagging_model(encoder, len(graph.tag_names))
        result["examples_per_second"], result["loss"] = train(
            model, masked_tag_loss, tagging_dataset(features, args.batch_size, args.seed), args)
        scores = conlleval.entity_scores([s.tags for s in dev], predict_tags(TaggingSignatures(model, graph), dev))
        result.update(scores.as_dict())
    else:
        length = args.sequence_length or 384
        train_examples = squad.read_squad(os.path.join(args.data_dir, "squad", "train.json")).examples
        dev = squad.read_squad(os.path.join(args.data_dir, "squad", "dev.json")).examples[:args.dev_examples]
        graph = SpanGraph(vocabulary, sequence_length=length)
        features = span_features(graph, train_examples[:args.train_examples])
        result["train_windows"] = len(features.positions)
        model = build_span_model(encoder)
        result["examples_per_second"], result["loss"] = train(
            model, span_loss, span_dataset(features, args.batch_size, args.seed), args)
        predictions = predict_answers(SpanSignatures(model, graph), dev)
        result.update(squad.squad_scores(predictions, {e.uid: [a.text for a in e.answers] for e in dev}))
    result["sequence_length"] = length
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
