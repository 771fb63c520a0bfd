"""Write pretraining examples (NSP pairs, unmasked) as sharded TFRecords.

    python -m pipelines.make_pretraining_data --config pipelines/configs/pretrain_mini.json \
        --vocab_file runs/x/vocab.txt --output_dir runs/shards --num_shards 8

Masking stays dynamic: it happens when the shards are read back for training
(`--set data.tfrecord_dir=runs/shards` on pipelines.pretrain).
"""

import sys

from pipelines.common import main_guard, pipeline_parser


def main(argv=None) -> int:
    from kerasbert.data.corpus import default_data_dir

    parser = pipeline_parser("python -m pipelines.make_pretraining_data", __doc__)
    parser.add_argument("--config", required=True, help="Pretraining config (data and model sections).")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="Override one config field. Repeatable.")
    parser.add_argument("--vocab_file", default=None,
                        help="Vocabulary to tokenize with (default: the config's data.vocab_file).")
    parser.add_argument("--init_checkpoint", default=None,
                        help="Or tokenize with this checkpoint's vocabulary.")
    parser.add_argument("--data_dir", default=default_data_dir(), help="Shared data folder.")
    parser.add_argument("--output_dir", required=True, help="Folder for the .tfrecord shards.")
    parser.add_argument("--num_shards", type=int, default=8, help="Number of shard files.")
    args = parser.parse_args(argv)

    def run():
        from kerasbert import tokenization
        from kerasbert.config import PretrainConfig, load_config
        from kerasbert.data.corpus import load_labelled_corpora
        from kerasbert.pretraining.dataset import write_tfrecords
        from kerasbert.pretraining.inputs import tokenize_documents, training_pairs

        config = load_config(PretrainConfig, args.config, args.overrides)
        if args.init_checkpoint:
            tokenizer = tokenization.load_tokenizer(args.init_checkpoint)
        elif args.vocab_file or config.data.vocab_file:
            tokenizer = tokenization.make_tokenizer(args.vocab_file or config.data.vocab_file)
        else:
            raise ValueError("Give --vocab_file, --init_checkpoint or data.vocab_file: shards hold "
                             "token ids, so the vocabulary must be fixed first (pipelines.vocab).")
        documents, sources = load_labelled_corpora(config.data.sources, args.data_dir)
        pairs = training_pairs(config, tokenize_documents(tokenizer, documents), sources)
        paths = write_tfrecords(pairs, args.output_dir, args.num_shards)
        print(f"== wrote {len(pairs)} examples to {len(paths)} shards in {args.output_dir}")

    return main_guard(run, verbose=args.verbose)


if __name__ == "__main__":
    sys.exit(main())
