r"""Score a fine-tuned model on any file of a task's format; print the metrics as JSON.

    python -m pipelines.evaluate --model_dir runs/finetune_tiny --task sts \
        --data_file ../shared/data/cs224n/sts-dev.tsv [--output metrics.json]

Keys match the fine-tuning run's metrics.json (sst_accuracy; para_accuracy, para_f1;
sts_pearson, sts_spearman; cfimdb_accuracy; sst2_accuracy). Files in the CS224N or GLUE layouts are
both read (a GLUE SST-2 file is task sst2: two classes, not SST-5's five).
"""

import sys

from kerasbert.tasks import TASKS
from pipelines.common import main_guard, pipeline_parser


def main(argv=None) -> int:
    parser = pipeline_parser("python -m pipelines.evaluate", __doc__)
    parser.add_argument("--model_dir", required=True, help="Output folder of pipelines.finetune.")
    parser.add_argument("--task", required=True, choices=tuple(TASKS), help="Which task's head.")
    parser.add_argument("--data_file", required=True, help="Labelled file of that task's format.")
    parser.add_argument("--output", default=None, help="Also write the metrics JSON here.")
    args = parser.parse_args(argv)

    def run():
        import json

        from kerasbert.finetuning.load import load_finetuned
        from kerasbert.finetuning.evaluation import score_file

        _, model, preprocessor = load_finetuned(args.model_dir)
        metrics = score_file(model, preprocessor, args.task, args.data_file)
        text = json.dumps(metrics, indent=2)
        print(text)
        if args.output:
            with open(args.output, "w") as f:
                f.write(text + "\n")

    return main_guard(run, verbose=args.verbose)


if __name__ == "__main__":
    sys.exit(main())
