"""The most similar pair among N sentences: bi-encoder against cross-encoder.

    python -m benchmarks.search --bi_model runs/bench-multitask/minilm_bi \
        --cross_model runs/bench-multitask/minilm_cross [--sizes 1000 5000] [--sample_pairs 1024]

The sentences are the first N distinct questions of the Quora training file. The
bi-encoder embeds each sentence once and takes the best of all N(N-1)/2 cosines (one
matrix product, in blocks): timed end to end. The cross-encoder must run BERT on every
pair; its time per pair is measured on a random sample of pairs (batches of 64) and
multiplied by N(N-1)/2: an extrapolation, reported as such. Paraphrase accuracy is each
model's Quora dev accuracy from its fine-tuning metrics.json. Writes results.json and
results.md under --output_dir.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np


def distinct_questions(path: str, count: int) -> list[str]:
    from kerasbert.finetuning.data import load_examples

    seen: dict[str, None] = {}
    for example in load_examples("para", path):
        for text in (example.text_a, example.text_b):
            seen.setdefault(text.strip(), None)
    questions = [q for q in seen if q]
    if len(questions) < count:
        raise ValueError(f"{path}: {len(questions)} distinct questions, fewer than {count}")
    return questions[:count]


def bi_encoder_search(embedder, sentences: list[str]) -> dict:
    from kerasbert.search import most_similar_pair

    started = time.perf_counter()
    vectors = embedder(sentences)
    embedded = time.perf_counter()
    i, j, cosine = most_similar_pair(vectors)
    done = time.perf_counter()
    return {"seconds": done - started, "embed_seconds": embedded - started, "pair_seconds": done - embedded,
            "pair": [sentences[i], sentences[j]], "cosine": cosine}


def cross_encoder_seconds_per_pair(model, preprocessor, sentences: list[str], sample_pairs: int,
                                   batch_size: int = 64, seed: int = 0) -> float:
    """Median seconds per pair over batches of random pairs (after one warm-up batch)."""
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    first = rng.integers(0, len(sentences), sample_pairs + batch_size)
    second = (first + rng.integers(1, len(sentences), first.shape)) % len(sentences)  # never the same
    score = tf.function(lambda a, b: model.task_prediction("para", preprocessor("para", a, b)),
                        input_signature=[tf.TensorSpec([None], tf.string)] * 2)
    per_pair = []
    for start in range(0, len(first), batch_size):
        a = tf.constant([sentences[k] for k in first[start:start + batch_size]])
        b = tf.constant([sentences[k] for k in second[start:start + batch_size]])
        began = time.perf_counter()
        score(a, b).numpy()
        if start:  # the first batch traces the function
            per_pair.append((time.perf_counter() - began) / len(a))
    return statistics.median(per_pair)


def render_markdown(results: dict) -> str:
    lines = ["# Most similar pair among N sentences: bi-encoder vs cross-encoder", "",
             f"Command: `{results['command']}`  ", f"Machine: {results['machine']}  ",
             f"Updated: {results['updated']}", "",
             f"Sentences: the first N distinct questions of `{results['sentences_file']}`. "
             f"Cross-encoder times are **extrapolated**: seconds per pair measured on "
             f"{results['sample_pairs']} random pairs (median over batches of 64), times N(N-1)/2.", "",
             "| N | pairs | bi-encoder (measured) | cross-encoder (extrapolated) | ratio |",
             "|---:|---:|---:|---:|---:|"]
    for row in results["rows"]:
        lines.append(f"| {row['n']:,} | {row['pairs']:,} | {row['bi']['seconds']:.1f} s "
                     f"(embed {row['bi']['embed_seconds']:.1f} s + pairs {row['bi']['pair_seconds']:.2f} s) | "
                     f"{row['cross_seconds'] / 3600:.1f} h | {row['cross_seconds'] / row['bi']['seconds']:,.0f}x |")
    lines += ["", f"Cross-encoder: {1000 * results['cross_seconds_per_pair']:.2f} ms per pair.", "",
              "Most similar pair found by the bi-encoder:", ""]
    for row in results["rows"]:
        a, b = row["bi"]["pair"]
        lines.append(f"- N = {row['n']:,}: \"{a}\" / \"{b}\" (cosine {row['bi']['cosine']:.3f})")
    lines += ["", "| model | Quora dev paraphrase accuracy | from |", "|---|---:|---|"]
    for name in ("bi", "cross"):
        lines.append(f"| {name}-encoder | {results['para_accuracy'][name]:.3f} | `{results['models'][name]}` |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    from benchmarks.results import load_results, save_results
    from kerasbert.data.corpus import default_data_dir

    parser = argparse.ArgumentParser(prog="python -m benchmarks.search", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bi_model", default="runs/bench-multitask/minilm_bi",
                        help="Fine-tuning output with bi-encoder pair heads (its embed path).")
    parser.add_argument("--cross_model", default="runs/bench-multitask/minilm_cross",
                        help="Fine-tuning output with cross-encoder pair heads.")
    parser.add_argument("--data_dir", default=default_data_dir(), help="Shared data folder.")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 5000], help="Corpus sizes N.")
    parser.add_argument("--sample_pairs", type=int, default=1024, help="Pairs timed for the cross-encoder.")
    parser.add_argument("--output_dir", default="runs/bench-search", help="Results folder.")
    args = parser.parse_args(argv)

    from kerasbert.finetuning.load import load_finetuned
    from kerasbert.search import KerasEmbedder

    sentences_file = os.path.join(args.data_dir, "cs224n", "quora-train.tsv")
    sentences = distinct_questions(sentences_file, max(args.sizes))
    embedder = KerasEmbedder(args.bi_model)
    embedder(sentences[:64])  # trace once, outside the timings
    _, cross_model, cross_pre = load_finetuned(args.cross_model)
    print(f"== timing the cross-encoder on {args.sample_pairs} random pairs", flush=True)
    per_pair = cross_encoder_seconds_per_pair(cross_model, cross_pre, sentences, args.sample_pairs)
    rows = []
    for n in args.sizes:
        print(f"== bi-encoder: most similar pair among {n:,} sentences", flush=True)
        bi = bi_encoder_search(embedder, sentences[:n])
        pairs = n * (n - 1) // 2
        rows.append({"n": n, "pairs": pairs, "bi": bi, "cross_seconds": per_pair * pairs})
        print(f"   {bi['seconds']:.1f} s measured; cross-encoder {per_pair * pairs / 3600:.1f} h extrapolated",
              flush=True)
    accuracy = {}
    for name, path in (("bi", args.bi_model), ("cross", args.cross_model)):
        with open(os.path.join(path, "metrics.json")) as f:
            accuracy[name] = json.load(f)["para_accuracy"]
    results = load_results(args.output_dir, default={})
    results.update(rows=rows, cross_seconds_per_pair=per_pair, sample_pairs=args.sample_pairs,
                   sentences_file=sentences_file, para_accuracy=accuracy,
                   models={"bi": args.bi_model, "cross": args.cross_model})
    save_results(args.output_dir, results, "benchmarks.search", render_markdown)
    print(render_markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
