r"""Find the sentences of a corpus nearest a query, by cosine of bi-encoder embeddings.

    python -m pipelines.search --model_dir runs/finetune --corpus questions.txt \
        --query "how do I learn python?" [--query "..."] [--top_k 5]
    python -m pipelines.search --model_dir saved_models/kerasbert/1 --corpus questions.txt --query "..."
    python -m pipelines.search --model_dir saved_models/kerasbert/1 --index runs/index/questions --query "..."

--model_dir is a pipelines.finetune output folder or an exported SavedModel version
(its `embed` signature, or --signature: an embedding task's). The corpus (one sentence per
line) is embedded once and cached under --cache_dir, keyed by the model's weights and the corpus text; later
queries on the same corpus embed only the query. Prints JSON (progress goes to stderr): per query, the top_k
sentences with their rank and cosine similarity.

A corpus file is searched exactly (a matrix product against every sentence): right for up to
about 100,000 sentences. Past that, embed the corpus with pipelines.batch_predict (on Beam),
index it with pipelines.build_index, and pass --index instead of --corpus: the same JSON,
from an approximate nearest-neighbour index (with --model_dir the export that embedded it).
"""

import sys

from pipelines.common import main_guard, pipeline_parser


def main(argv=None) -> int:
    parser = pipeline_parser("python -m pipelines.search", __doc__)
    parser.add_argument("--model_dir", required=True,
                        help="pipelines.finetune output folder, or a SavedModel version folder with an "
                             "`embed` signature.")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--corpus", help="Text file, one sentence per line (exact search).")
    source.add_argument("--index", help="Index folder of pipelines.build_index (approximate search).")
    parser.add_argument("--query", action="append", required=True,
                        help="Text to search for. Repeatable.")
    parser.add_argument("--top_k", type=int, default=5, help="How many nearest sentences per query (default 5).")
    parser.add_argument("--cache_dir", default=None,
                        help="Where corpus embeddings are cached (default: <model_dir>/search_cache for a "
                             "fine-tuning run, $XDG_CACHE_HOME/kerasbert/search (~/.cache/...) for a "
                             "SavedModel, whose folder a server may be watching; '' turns caching off).")
    parser.add_argument("--batch_size", type=int, default=64, help="Sentences per embedding batch (default 64).")
    parser.add_argument("--signature", default="embed",
                        help="A SavedModel's text -> embedding signature: embed (default) or an embedding "
                             "task's (named after it).")
    args = parser.parse_args(argv)
    if args.top_k < 1:
        parser.error("--top_k must be at least 1")

    def run():
        import json

        from kerasbert.search import make_embedder

        embedder = make_embedder(args.model_dir, args.batch_size, args.signature)
        if args.index:
            indices, scores, texts = search_index(embedder, args.index, args.query, args.top_k)
        else:
            indices, scores, texts = search_corpus(embedder, args.corpus, args.query, args.top_k,
                                                   corpus_cache_dir(args.model_dir, args.cache_dir))
        results = [{"query": query,
                    "results": [{"rank": rank, "text": texts[i], "cosine": round(float(score), 4)}
                                for rank, (i, score) in enumerate(zip(row, row_scores), start=1)]}
                   for query, row, row_scores in zip(args.query, indices, scores)]
        print(json.dumps(results, indent=2, ensure_ascii=False))

    return main_guard(run, verbose=args.verbose)


def corpus_cache_dir(model_dir: str, cache_dir: str | None) -> str:
    import os

    if cache_dir is not None:
        return cache_dir
    if os.path.exists(os.path.join(model_dir, "saved_model.pb")):  # a server may be watching that folder
        cache_root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        return os.path.join(cache_root, "kerasbert", "search")
    return os.path.join(model_dir, "search_cache")


def search_corpus(embedder, corpus: str, queries: list[str], top_k: int, cache_dir: str):
    import contextlib
    import logging

    from kerasbert.search import embed_corpus, nearest, read_sentences
    from kerasbert.vector_index import EXACT_SEARCH_LIMIT

    sentences = read_sentences(corpus)
    if len(sentences) > EXACT_SEARCH_LIMIT:
        logging.warning(f"{corpus}: {len(sentences):,} sentences, searched exactly; past {EXACT_SEARCH_LIMIT:,} an "
                        "index answers faster (pipelines.batch_predict, pipelines.build_index, then --index)")
    with contextlib.redirect_stdout(sys.stderr):  # the progress bar; stdout is the JSON answer
        vectors = embed_corpus(embedder, sentences, cache_dir)
    return (*nearest(embedder(queries), vectors, top_k), sentences)


def search_index(embedder, folder: str, queries: list[str], top_k: int):
    from kerasbert.vector_index import load_index

    index, rows = load_index(folder)
    indices, scores = index.search(embedder(queries), min(top_k, len(rows)))
    return indices, scores, [row["text"] for row in rows]


if __name__ == "__main__":
    sys.exit(main())
