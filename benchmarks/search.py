"""The most similar pair among N sentences (the first N distinct Quora train questions) with
a bi-encoder, timed end to end, beside the bi- and cross-encoder's Quora dev paraphrase
accuracy (from their metrics.json): what one embedding per sentence costs in accuracy.

    python -m benchmarks.search --bi_model runs/bench-multitask/minilm_bi \
        --cross_model runs/bench-multitask/minilm_cross [--sizes 1000 5000]
"""

from __future__ import annotations

import json
import os
import sys
import time

TITLE = "Most similar pair among N sentences: bi-encoder"  # of results.md


def distinct_questions(path: str, count: int) -> list[str]:
    from kerasbert.finetuning.data import load_examples

    seen: dict[str, None] = {}
    for example in load_examples("para", path):
        for text in (example.text_a, example.text_b):
            seen.setdefault(text.strip(), None)
    questions = [q for q in seen if q]
    if len(questions) < count:
        from kerasbert.errors import DataError

        raise DataError(f"{path}: {len(questions)} distinct questions, fewer than {count}")
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


def main(argv=None) -> int:
    from benchmarks.results import bench_parser, load_results, save_results

    parser = bench_parser("search", __doc__)
    parser.add_argument("--bi_model", default="runs/bench-multitask/minilm_bi",
                        help="Fine-tuning output with bi-encoder pair heads (its embed path).")
    parser.add_argument("--cross_model", default="runs/bench-multitask/minilm_cross",
                        help="Fine-tuning output with cross-encoder pair heads (its dev accuracy).")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 5000], help="Corpus sizes N.")
    args = parser.parse_args(argv)

    from kerasbert.search import KerasEmbedder

    sentences_file = os.path.join(args.data_dir, "cs224n", "quora-train.tsv")
    sentences = distinct_questions(sentences_file, max(args.sizes))
    embedder = KerasEmbedder(args.bi_model)
    embedder(sentences[:64])  # trace once, outside the timings
    rows = []
    for n in args.sizes:
        print(f"== bi-encoder: most similar pair among {n:,} sentences", flush=True)
        bi = bi_encoder_search(embedder, sentences[:n])
        rows.append({"n": n, "pairs": n * (n - 1) // 2, "bi": bi})
        print(f"   {bi['seconds']:.1f} s", flush=True)
    accuracy = {}
    for name, path in (("bi", args.bi_model), ("cross", args.cross_model)):
        with open(os.path.join(path, "metrics.json")) as f:
            accuracy[name] = json.load(f)["para_accuracy"]
    results = load_results(args.output_dir, default={})
    results.update(rows=rows, sentences_file=sentences_file, para_accuracy=accuracy,
                   models={"bi": args.bi_model, "cross": args.cross_model})
    print(save_results(args.output_dir, results, "benchmarks.search", TITLE))
    return 0


if __name__ == "__main__":
    sys.exit(main())
