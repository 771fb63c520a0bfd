r"""Average the weights of several fine-tuned runs into one model (a uniform model soup).

    python -m pipelines.soup --model_dirs runs/seed1 runs/seed2 runs/seed3 \
        --data_dir ../shared/data --output_dir runs/soup

The runs must share heads, sequence length and vocabulary (for instance one config trained
with different --set train.seed=N). The output folder has the layout of pipelines.finetune's,
scored on the first run's dev files, so pipelines.evaluate and pipelines.export take it.
"""

import sys

from kerasbert.data.corpus import default_data_dir
from pipelines.common import data_dir, main_guard, output_folder, pipeline_parser


def main(argv=None) -> int:
    parser = pipeline_parser("python -m pipelines.soup", __doc__)
    parser.add_argument("--model_dirs", required=True, nargs="+",
                        help="Two or more output folders of pipelines.finetune.")
    parser.add_argument("--data_dir", default=default_data_dir(), type=data_dir,
                        help="Folder holding cs224n/ (default: $KERASBERT_DATA_DIR or ../shared/data).")
    parser.add_argument("--output_dir", required=True, type=output_folder, help="Folder for the soup.")
    parser.add_argument("--overwrite", action="store_true", help="Replace a finished soup in --output_dir.")
    args = parser.parse_args(argv)

    def run():
        import os

        from kerasbert.finetuning.soup import run_soup

        if os.path.exists(os.path.join(args.output_dir, "metrics.json")) and not args.overwrite:
            raise FileExistsError(f"{args.output_dir} holds a finished soup (metrics.json); pass --overwrite to "
                                  "replace it")
        run_soup(args.model_dirs, args.data_dir, args.output_dir)

    return main_guard(run, verbose=args.verbose)


if __name__ == "__main__":
    sys.exit(main())
