"""Train an uncased WordPiece vocabulary with BERT's special tokens.

    python -m pipelines.vocab --corpus wikitext --corpus imdb --vocab_size 8000 --output vocab.txt

A corpus is a name (wikitext, wikitext_test, imdb, sst, sts, quora, tasks_dev, read
from --data_dir) or the path of a text file (documents separated by blank lines).
"""

import sys

from pipelines.common import main_guard, pipeline_parser


def main(argv=None) -> int:
    from kerasbert.data.corpus import default_data_dir

    parser = pipeline_parser("python -m pipelines.vocab", __doc__)
    parser.add_argument("--corpus", action="append", required=True,
                        help="Corpus name or text file path. Repeatable.")
    parser.add_argument("--vocab_size", type=int, default=8000,
                        help="Largest vocabulary size, special tokens included (default 8000): tf_text's "
                        "learner lands at or below it.")
    parser.add_argument("--output", required=True, help="Where to write vocab.txt (one token a line).")
    parser.add_argument("--data_dir", default=default_data_dir(),
                        help="Folder holding cs224n/ and wikitext-2/ for named corpora.")
    parser.add_argument("--overwrite", action="store_true",
                        help="Replace an existing --output (runs and shards made with it hold its token ids).")
    args = parser.parse_args(argv)

    def run():
        import os

        from kerasbert.data.corpus import load_corpora

        if os.path.exists(args.output) and not args.overwrite:
            raise FileExistsError(f"{args.output} exists: runs and shards tokenized with it would no longer match "
                                  "it; pass --overwrite to replace it")
        from kerasbert.tokenization import train_vocabulary

        documents = load_corpora(args.corpus, args.data_dir)
        sentences = [s for doc in documents for s in doc]
        print(f"== training on {len(sentences)} sentences from {args.corpus}", flush=True)
        vocabulary = train_vocabulary(sentences, args.vocab_size, args.output)
        print(f"== wrote {len(vocabulary)} tokens to {args.output}"
              + (f" (at most {args.vocab_size} asked for: tf_text's learner searches a piece-count "
                 "threshold that keeps the vocabulary at or below it)" if len(vocabulary) < args.vocab_size else ""))

    return main_guard(run, verbose=args.verbose)


if __name__ == "__main__":
    sys.exit(main())
