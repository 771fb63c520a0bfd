r"""Build an approximate nearest-neighbour index of the embeddings pipelines.batch_predict wrote.

    python -m pipelines.batch_predict --model_dir saved_models/kerasbert/3 --signature embed \
        --input "questions/*.txt" --output runs/embed/questions
    python -m pipelines.build_index --embeddings runs/embed/questions --output runs/index/questions
    python -m pipelines.search --index runs/index/questions --model_dir saved_models/kerasbert/3 --query "..."

Reads every result shard under the --embeddings prefix (`PREFIX-*-of-*.jsonl`, or
.tfrecord with --input_format tfrecord), L2-normalises the vectors and builds a ScaNN index
(default; --backend faiss for FAISS), saved with each vector's id and text. Why ScaNN and
with which parameters: docs/benchmarks.md (make bench-batch).
"""

import sys

from kerasbert.errors import DataError
from pipelines.common import main_guard, output_folder, pipeline_parser, require


def main(argv=None) -> int:
    parser = pipeline_parser("python -m pipelines.build_index", __doc__)
    parser.add_argument("--embeddings", required=True, help="The --output prefix of pipelines.batch_predict.")
    parser.add_argument("--output", required=True, type=output_folder, help="Folder for the index.")
    parser.add_argument("--backend", default="scann", choices=("scann", "faiss"),
                        help="Index library: scann (default, chosen by make bench-batch) or faiss.")
    parser.add_argument("--output_name", default="embedding", help="The signature output to index.")
    parser.add_argument("--input_format", default="jsonl", choices=("jsonl", "tfrecord"),
                        help="What batch_predict wrote (its --output_format).")
    parser.add_argument("--overwrite", action="store_true", help="Replace an index already in --output.")
    args = parser.parse_args(argv)

    def run():
        import time

        require("scann" if args.backend == "scann" else "faiss")

        from kerasbert.batch.records import read_results
        from kerasbert.quiet import native_stderr_hidden
        from kerasbert.vector_index import build_index, save_index

        ids, texts, vectors = read_results(args.embeddings, args.output_name, args.input_format)
        if len(set(ids)) != len(ids):
            raise DataError(f"{args.embeddings}: an id occurs twice; were two runs written under one prefix?")
        started = time.perf_counter()
        with native_stderr_hidden(args.verbose):  # ScaNN's C++ progress lines
            index = build_index(vectors, args.backend)
        save_index(index, ids, texts, args.output, overwrite=args.overwrite)
        print(f"== indexed {len(ids):,} vectors of {vectors.shape[1]} dimensions with {args.backend} "
              f"{index.params} in {time.perf_counter() - started:.1f} s -> {args.output}")

    return main_guard(run, verbose=args.verbose)


if __name__ == "__main__":
    sys.exit(main())
