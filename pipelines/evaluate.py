r"""Score a fine-tuned model on any file of a task's format; print the metrics as JSON.

    python -m pipelines.evaluate --model_dir runs/finetune_tiny --task sts \
        --data_file ../shared/data/cs224n/sts-dev.tsv [--output metrics.json]

--task is any task the run has a head for (shipped or declared in its config: the run
folder carries the declarations and the classes its training files gave). Keys match the
fine-tuning run's metrics.json (sst_accuracy; para_accuracy, para_f1; sts_pearson,
sts_spearman; <task>_accuracy or <task>_pearson for a declared task). The file is read as
the task's files are (CSV, TSV, JSON Lines by extension; the CS224N or GLUE layouts for the
shipped tasks).
"""

import sys

from pipelines.common import main_guard, pipeline_parser


def main(argv=None) -> int:
    parser = pipeline_parser("python -m pipelines.evaluate", __doc__)
    parser.add_argument("--model_dir", required=True, help="Output folder of pipelines.finetune.")
    parser.add_argument("--task", required=True, help="Which task's head (a task of the run).")
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
