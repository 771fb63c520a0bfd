r"""Pretrain BERT with masked-LM + next-sentence prediction.

    python -m pipelines.pretrain --config pipelines/configs/pretrain_tiny.json \
        --output_dir runs/pretrain_tiny [--init_checkpoint DIR] [--strategy mirrored]

Run the same command again after a crash: it resumes from the last backup.
"""

import sys

from pipelines.common import add_common_flags, main_guard, pipeline_parser


def main(argv=None) -> int:
    parser = pipeline_parser("python -m pipelines.pretrain", __doc__)
    add_common_flags(parser)
    args = parser.parse_args(argv)

    def run():
        # The strategy first: splitting the CPU must precede any other TF work.
        from kerasbert.training.strategy import make_strategy
        strategy = make_strategy(args.strategy, cpu_devices=args.cpu_devices)
        from kerasbert.config import PretrainConfig, load_config
        from kerasbert.pretraining.run import run_pretraining
        config = load_config(PretrainConfig, args.config, args.overrides)
        run_pretraining(config, args.data_dir, args.output_dir, args.init_checkpoint, strategy,
                        overwrite=args.overwrite)

    return main_guard(run, verbose=args.verbose)


if __name__ == "__main__":
    sys.exit(main())
