"""Find the sentences of a corpus nearest a query, by cosine of bi-encoder embeddings.

    python -m pipelines.search --model_dir runs/finetune --corpus questions.txt \
        --query "how do I learn python?" [--query "..."] [--top_k 5]
    python -m pipelines.search --model_dir saved_models/kerasbert/1 --corpus questions.txt --query "..."

--model_dir is a pipelines.finetune output folder or an exported SavedModel version
(its `embed` signature). The corpus (one sentence per line) is embedded once and
cached under --cache_dir, keyed by the model's weights and the corpus text; later
queries on the same corpus embed only the query. Prints JSON (progress goes to stderr): per query, the top_k
sentences with their rank and cosine similarity.
"""

import sys

from pipelines.common import main_guard, pipeline_parser


def main(argv=None) -> int:
    parser = pipeline_parser("python -m pipelines.search", __doc__)
    parser.add_argument("--model_dir", required=True,
                        help="pipelines.finetune output folder, or a SavedModel version folder with an "
                             "`embed` signature.")
    parser.add_argument("--corpus", required=True, help="Text file, one sentence per line.")
    parser.add_argument("--query", action="append", required=True,
                        help="Text to search for. Repeatable.")
    parser.add_argument("--top_k", type=int, default=5, help="How many nearest sentences per query (default 5).")
    parser.add_argument("--cache_dir", default=None,
                        help="Where corpus embeddings are cached (default: <model_dir>/search_cache for a "
                             "fine-tuning run, $XDG_CACHE_HOME/kerasbert/search (~/.cache/...) for a "
                             "SavedModel, whose folder a server may be watching; '' turns caching off).")
    parser.add_argument("--batch_size", type=int, default=64, help="Sentences per embedding batch (default 64).")
    args = parser.parse_args(argv)
    if args.top_k < 1:
        parser.error("--top_k must be at least 1")

    def run():
        import contextlib
        import json
        import os

        from kerasbert.search import embed_corpus, make_embedder, nearest, read_sentences

        sentences = read_sentences(args.corpus)
        embedder = make_embedder(args.model_dir, args.batch_size)
        cache_dir = args.cache_dir
        if cache_dir is None and os.path.exists(os.path.join(args.model_dir, "saved_model.pb")):
            cache_root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
            cache_dir = os.path.join(cache_root, "kerasbert", "search")
        elif cache_dir is None:
            cache_dir = os.path.join(args.model_dir, "search_cache")
        with contextlib.redirect_stdout(sys.stderr):  # the progress bar; stdout is the JSON answer
            vectors = embed_corpus(embedder, sentences, cache_dir)
        indices, scores = nearest(embedder(args.query), vectors, args.top_k)
        results = [{"query": query,
                    "results": [{"rank": rank, "text": sentences[i], "cosine": round(float(score), 4)}
                                for rank, (i, score) in enumerate(zip(row, row_scores), start=1)]}
                   for query, row, row_scores in zip(args.query, indices, scores)]
        print(json.dumps(results, indent=2, ensure_ascii=False))

    return main_guard(run, verbose=args.verbose)


if __name__ == "__main__":
    sys.exit(main())
