"""Score a fine-tuned model on any file of a task's format; print the metrics as JSON.

    python -m pipelines.evaluate --model_dir runs/finetune_tiny --task sts \
        --data_file ../shared/data/cs224n/sts-dev.tsv [--output metrics.json]

Keys match the fine-tuning run's metrics.json: sst_accuracy; para_accuracy, para_f1;
sts_pearson, sts_spearman. Files in the CS224N or GLUE layouts are both read.
"""

import argparse
import sys

from pipelines.common import main_guard


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipelines.evaluate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model_dir", required=True, help="Output folder of pipelines.finetune.")
    parser.add_argument("--task", required=True, choices=("sst", "para", "sts"), help="Which task's head.")
    parser.add_argument("--data_file", required=True, help="Labelled file of that task's format.")
    parser.add_argument("--output", default=None, help="Also write the metrics JSON here.")
    args = parser.parse_args(argv)

    def run():
        import json
        import os

        import keras

        from kerasbert.config import FinetuneConfig, load_config
        from kerasbert.finetuning import model as _  # noqa: F401  registers MultitaskBert
        from kerasbert.finetuning.data import TaskPreprocessor, load_examples, task_dataset
        from kerasbert.finetuning.evaluation import predict_task, task_metrics
        from kerasbert.tokenization import load_tokenizer

        config = load_config(FinetuneConfig, os.path.join(args.model_dir, "config.json"))
        model = keras.models.load_model(os.path.join(args.model_dir, "model.keras"), compile=False)
        preprocessor = TaskPreprocessor(load_tokenizer(os.path.join(args.model_dir, "encoder")),
                                        config.data.max_sequence_length, config.heads.pair_encoder)
        examples = load_examples(args.task, args.data_file)
        dataset = task_dataset(args.task, examples, preprocessor, 64, training=False)
        metrics = task_metrics(args.task, [e.label for e in examples],
                               predict_task(model, args.task, dataset))
        text = json.dumps(metrics, indent=2)
        print(text)
        if args.output:
            with open(args.output, "w") as f:
                f.write(text + "\n")

    return main_guard(run)


if __name__ == "__main__":
    sys.exit(main())
