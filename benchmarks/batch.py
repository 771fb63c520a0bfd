"""Embedding search on Quora questions (`make bench-batch`; docs/benchmarks.md tells the figures),
on an export under --export_base (make demo writes one):
1. --sentences distinct questions embedded (`embed`, --batch_size) by `pipelines.batch_predict`
   (direct runner, 2 workers) and by a plain loop in one process, each from process start to finish.
2. --vectors vectors, the real embeddings and synthetic ones around them (`synthetic_around`),
   searched by 1,000 held-out questions: recall@10 against exact search and queries/s (one at a
   time, batches of 64) of exact search and of ScaNN at half, its default and twice its share of
   leaves searched.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np

from benchmarks.peer_protocol import time_batches
from benchmarks.results import bench_parser, load_results, render_markdown, save_results
from benchmarks.serving import newest_version
from kerasbert.batch.records import read_results
from kerasbert.data.corpus import read_task_sentences
from kerasbert.errors import DataError
from kerasbert.quiet import native_stderr_hidden
from kerasbert.search import SavedModelEmbedder, nearest
from kerasbert.vector_index import build_index, normalized, save_index

TITLE = "Batch inference on Beam against a loop; vector search at scale"  # of results.md
LOOP = """
import json, sys, time
started = time.perf_counter()
from kerasbert.cpu_kernels import prefer_onednn
prefer_onednn()  # as batch_predict's workers do
import tensorflow as tf, tensorflow_text  # noqa
model_dir, path, batch = sys.argv[1], sys.argv[2], int(sys.argv[3])
embed = tf.saved_model.load(model_dir).signatures["embed"]
loaded = time.perf_counter()
sentences = [line.rstrip("\\n") for line in open(path, encoding="utf-8")]
calls = 0.0
for i in range(0, len(sentences), batch):
    t = time.perf_counter(); embed(text=tf.constant(sentences[i:i + batch]))["embedding"].numpy()
    calls += time.perf_counter() - t
print(json.dumps({"load_seconds": loaded - started, "call_seconds": calls}))
"""


def timed_batch_predict(model_dir: str, corpus: str, prefix: str, batch: int) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pipelines.batch_predict", "--model_dir", model_dir, "--signature",
                    "embed", "--input", corpus, "--output", prefix, "--overwrite", "--min_batch_size", str(batch),
                    "--max_batch_size", str(batch), "--direct_num_workers", "2", "--direct_running_mode",
                    "multi_processing"], check=True)
    return time.perf_counter() - started


def timed_loop(model_dir: str, corpus: str, batch: int) -> dict:
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-c", LOOP, model_dir, corpus, str(batch)], check=True,
                            capture_output=True, text=True)
    return {"seconds": time.perf_counter() - started, **json.loads(result.stdout.strip().splitlines()[-1])}


def synthetic_around(real: np.ndarray, count: int, rng) -> tuple[np.ndarray, float]:
    """`count` vectors, each a random real one plus Gaussian noise, normalised; the noise puts
    a synthetic vector at the median cosine of a real vector to its nearest real neighbour."""
    sample = real[rng.choice(len(real), size=min(2000, len(real)), replace=False)]
    cosines = sample @ real.T
    cosines[cosines > 0.99999] = -1  # itself (and exact duplicates)
    target = float(np.median(cosines.max(axis=1)))
    # |v + e|: with e ~ N(0, s^2 I) in d dimensions, cos(v, v + e) ~ 1 / sqrt(1 + d s^2)
    sigma = float(np.sqrt((1 / target ** 2 - 1) / real.shape[1]))
    parents = real[rng.integers(len(real), size=count)]
    return normalized(parents + sigma * rng.standard_normal(parents.shape, dtype=np.float32)), target


def search_part(vectors, queries, output_dir: str) -> dict:
    def rates(search, single: int, batched: int) -> dict:  # queries/s over the first queries, after a warm-up call
        search(queries[:64])
        return {"qps_single": time_batches(search, queries[:single], 1, 1)[0],
                "qps_batch_64": time_batches(search, queries[:batched], 64, 1)[0]}

    def top_10(search) -> np.ndarray:
        return np.concatenate([search(queries[i:i + 64]) for i in range(0, len(queries), 64)])

    exact = lambda q: nearest(q, vectors, 10)[0]  # noqa: E731
    truth, rows = top_10(exact), {"exact": {"recall_at_10": 1.0, **rates(exact, 20, 320)}}
    started = time.perf_counter()
    with native_stderr_hidden():
        index = build_index(vectors, "scann")
    build_seconds = time.perf_counter() - started
    folder = os.path.join(output_dir, "index-scann")
    save_index(index, [str(i) for i in range(len(vectors))], [""] * len(vectors), folder, overwrite=True)
    size = sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(folder) for name in names)
    default = index.params["leaves_to_search"]
    for count in (default // 2, default, default * 2):  # the share of the leaves searched: half, default, twice
        search = lambda q, n=count: index.searcher.search_batched(  # noqa: E731
            q, final_num_neighbors=10, leaves_to_search=n)[0]
        recall = float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(top_10(search), truth)]))
        name = f"scann, {count} of {index.params['leaves']} leaves" + (" (default)" if count == default else "")
        rows[name] = {"recall_at_10": recall, **rates(search, 500, len(queries)), "build_seconds": build_seconds,
                      "disk_bytes": size, "params": {**index.params, "leaves_to_search": count}}
    for row in rows.values():
        row["speedup_single"] = row["qps_single"] / rows["exact"]["qps_single"]
        row["speedup_batch_64"] = row["qps_batch_64"] / rows["exact"]["qps_batch_64"]
    return rows


def distinct_questions(path: str, count: int) -> list[str]:
    questions = [question for question, in read_task_sentences("para", path)]
    if len(questions) < count:
        raise DataError(f"{path}: {len(questions)} distinct questions, fewer than {count}")
    return questions[:count]


def part_batch(args, questions: list[str]) -> dict:
    model_dir = newest_version(args.export_base, required=True)
    corpus = os.path.join(args.output_dir, "questions.txt")
    with open(corpus, "w", encoding="utf-8") as f:
        f.write("\n".join(questions[:args.sentences]) + "\n")
    prefix = os.path.join(args.output_dir, "embed", "questions")
    beam_seconds = timed_batch_predict(model_dir, corpus, prefix, args.batch_size)
    loop = timed_loop(model_dir, corpus, args.batch_size)
    n = args.sentences
    results = {"model_dir": model_dir, "throughput": {
        "sentences": n, "beam_seconds": beam_seconds, "beam_sentences_per_second": n / beam_seconds,
        "loop_seconds": loop["seconds"], "loop_sentences_per_second": n / loop["seconds"],
        "loop_load_seconds": loop["load_seconds"], "loop_call_seconds": loop["call_seconds"],
        "loop_call_sentences_per_second": n / loop["call_seconds"], "ratio": loop["seconds"] / beam_seconds}}
    print(render_markdown(results, TITLE), flush=True)
    _, _, real = read_results(prefix, "embedding")
    real = normalized(real)
    queries = SavedModelEmbedder(model_dir, args.batch_size)(questions[args.sentences:])
    synthetic, cosine = synthetic_around(real, args.vectors - len(real), np.random.default_rng(0))
    vectors = np.concatenate([real, synthetic])
    del synthetic
    results["search"] = {"vectors": len(vectors), "real": len(real), "queries": len(queries),
                         "synthetic_cosine": cosine, "rows": search_part(vectors, queries, args.output_dir)}
    return results


def main(argv=None) -> int:
    parser = bench_parser("batch", __doc__)
    parser.add_argument("--export_base", default="saved_models/kerasbert", help="Its newest version is used.")
    parser.add_argument("--sentences", type=int, default=20000, help="Distinct questions to embed.")
    parser.add_argument("--vectors", type=int, default=1_000_000, help="Vectors to search over.")
    parser.add_argument("--batch_size", type=int, default=64, help="Batch size of both embedders.")
    args = parser.parse_args(argv)
    os.makedirs(args.output_dir, exist_ok=True)
    results = load_results(args.output_dir)
    results.update(part_batch(args, distinct_questions(os.path.join(args.data_dir, "cs224n", "quora-train.tsv"),
                                                       args.sentences + 1000)))
    print(save_results(args.output_dir, results, "benchmarks.batch", TITLE))
    return 0


if __name__ == "__main__":
    sys.exit(main())
