r"""Score a fine-tuned model on any file of a task's format; print the metrics as JSON.

    python -m pipelines.evaluate --run_dir runs/finetune_tiny --task sts \
        --data_file ../shared/data/cs224n/sts-dev.tsv [--output metrics.json]
    python -m pipelines.evaluate --run_dir runs/finetune_ner_tiny --task ner   # the task's dev file

--task is any task the run has a head for (shipped or declared in its config: the run
folder carries the declarations and the classes its training files gave). Keys match the
fine-tuning run's metrics.json (sst_accuracy; para_accuracy, para_f1; sts_pearson,
sts_spearman; ner_f1, ner_precision, ner_recall, ner_f1_<TYPE>; squad_f1,
squad_exact_match; <task>_accuracy or <task>_pearson for a declared task), computed by the
same code as the run's dev evaluation. The file is read as the task's files are (CSV, TSV,
JSON Lines by extension; the CS224N or GLUE layouts for the shipped tasks; CoNLL columns
for a tags task, SQuAD JSON for a span task); without --data_file, the task's dev file
(relative paths under --data_dir).
"""

import sys

from pipelines.common import data_dir, main_guard, pipeline_parser


def main(argv=None) -> int:
    parser = pipeline_parser("python -m pipelines.evaluate", __doc__)
    parser.add_argument("--run_dir", "--model_dir", dest="model_dir", required=True,
                        help="Output folder of pipelines.finetune.")
    parser.add_argument("--task", required=True, help="Which task's head (a task of the run).")
    parser.add_argument("--data_file", default=None,
                        help="Labelled file of that task's format (default: the task's dev file).")
    parser.add_argument("--data_dir", default=None, type=data_dir,
                        help="Where the task's relative dev file is (default: $KERASBERT_DATA_DIR, else "
                             "../shared/data).")
    parser.add_argument("--output", default=None, help="Also write the metrics JSON here.")
    args = parser.parse_args(argv)

    def run():
        import json

        from kerasbert.data.corpus import default_data_dir
        from kerasbert.finetuning.data import resolve_path
        from kerasbert.finetuning.evaluation import score_file
        from kerasbert.finetuning.load import load_finetuned

        _, model, preprocessor = load_finetuned(args.model_dir)
        path = args.data_file
        if path is None and args.task in model.task_specs:
            path = resolve_path(args.data_dir or default_data_dir(), model.task_specs[args.task].dev_file)
        metrics = score_file(model, preprocessor, args.task, path)
        text = json.dumps(metrics, indent=2)
        print(text)
        if args.output:
            with open(args.output, "w") as f:
                f.write(text + "\n")

    return main_guard(run, verbose=args.verbose)


if __name__ == "__main__":
    sys.exit(main())
