r"""Write pretraining examples (NSP pairs, unmasked) as sharded TFRecords, on Apache Beam.

    python -m pipelines.make_pretraining_data --config pipelines/configs/pretrain_mini.json \
        --vocab_file runs/x/vocab.txt --output_dir runs/shards --num_shards 8 \
        [--direct_num_workers 2 --direct_running_mode multi_processing]

Masking stays dynamic: it happens when the shards are read back for training
(`--set data.tfrecord_dir=runs/shards` on pipelines.pretrain). The corpus is split across
Beam's workers (DirectRunner in this process by default; --runner DataflowRunner, FlinkRunner
or SparkRunner with their own options); each document is cut with its own seed (train.seed,
source, document), so the examples per document are the same whichever runner and however
many workers. (pipelines.pretrain without shards cuts the corpus in memory with one random
stream instead: other examples of the same kind.)
"""

import sys

from kerasbert.errors import ConfigError
from pipelines.common import config_path, data_dir, main_guard, output_folder, pipeline_parser, require


def main(argv=None) -> int:
    from kerasbert.data.corpus import default_data_dir

    parser = pipeline_parser("python -m pipelines.make_pretraining_data", __doc__)
    parser.add_argument("--config", required=True, type=config_path, help="Pretraining config (data and model sections).")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="Override one config field. Repeatable.")
    parser.add_argument("--vocab_file", default=None,
                        help="Vocabulary to tokenize with (default: the config's data.vocab_file).")
    parser.add_argument("--init_checkpoint", default=None,
                        help="Or tokenize with this checkpoint's vocabulary.")
    parser.add_argument("--data_dir", default=default_data_dir(), type=data_dir, help="Shared data folder.")
    parser.add_argument("--output_dir", required=True, type=output_folder, help="Folder for the .tfrecord shards.")
    parser.add_argument("--num_shards", type=int, default=8, help="Number of shard files.")
    parser.add_argument("--overwrite", action="store_true", help="Replace shards already in --output_dir.")
    args, beam_args = parser.parse_known_args(argv)

    def run():
        require("apache_beam")
        import glob
        import os

        from kerasbert import tokenization
        from kerasbert.config import PretrainConfig, load_config
        from kerasbert.quiet import hide_library_logs

        config = load_config(PretrainConfig, args.config, args.overrides)
        if args.init_checkpoint:
            tokenizer = tokenization.load_tokenizer(args.init_checkpoint)
        elif args.vocab_file or config.data.vocab_file:
            tokenizer = tokenization.make_tokenizer(args.vocab_file or config.data.vocab_file)
        else:
            raise ConfigError("Give --vocab_file, --init_checkpoint or data.vocab_file: shards hold "
                              "token ids, so the vocabulary must be fixed first (pipelines.vocab).")
        existing = glob.glob(os.path.join(args.output_dir, "*.tfrecord"))
        if existing and not args.overwrite:
            raise FileExistsError(f"{args.output_dir} holds {len(existing)} shards already; pass --overwrite "
                                  "to replace them")
        for path in existing:
            os.remove(path)
        hide_library_logs("apache_beam", args.verbose)  # before Beam's import logs its first lines
        from kerasbert.pretraining.beam_data import write_pretraining_shards

        counts = write_pretraining_shards(config, tokenizer.get_vocabulary(), args.data_dir, args.output_dir,
                                          args.num_shards, beam_args, args.verbose)
        print(f"== wrote {counts['pairs']:,} NSP pairs and {counts['mlm_only']:,} MLM-only examples to "
              f"{args.num_shards} shards in {args.output_dir}")

    return main_guard(run, verbose=args.verbose)


if __name__ == "__main__":
    sys.exit(main())
