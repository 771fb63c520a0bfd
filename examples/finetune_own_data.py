"""Fine-tune on your own CSV (a text column and a label column, any labels), export it, serve it
and ask the server for the classes of two texts.

    python examples/finetune_own_data.py --train my-train.csv --dev my-dev.csv --text body --label category
    python examples/finetune_own_data.py   # writes a small CSV of support tickets and uses that

The task is declared in code (`kerasbert.Task`); its classes are the labels found in the
training file. The same declaration in a config runs with `python -m pipelines.finetune`."""

import argparse
import csv
import json
import os
import urllib.request

import kerasbert

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--train", help="Training CSV (default: a small one this script writes).")
parser.add_argument("--dev", help="Labelled CSV to score (default: the training file).")
parser.add_argument("--text", default="text", help="The text column.")
parser.add_argument("--label", default="label", help="The label column (any values: they become the classes).")
parser.add_argument("--output_dir", default="runs/own-data", help="The run folder; the export goes under it.")
parser.add_argument("--steps", type=int, default=60, help="Training steps (a multiple of 30).")
parser.add_argument("--init_checkpoint", help="Encoder to start from (default: the MiniLM checkpoint).")
args = parser.parse_args()


def write_sample(path):
    """Support tickets in three categories, made up."""
    topics = {"billing": ["I was charged twice", "refund my last payment", "my invoice is wrong"],
              "bug": ["the app crashes on start", "the page shows an error", "saving fails every time"],
              "account": ["I cannot log in", "reset my password please", "change the email of my account"]}
    with open(path, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([["text", "label"]] + [[f"{texts[i % 3]}, ticket {i}", label]
                                                       for i in range(40) for label, texts in topics.items()])
    return path


os.makedirs(args.output_dir, exist_ok=True)
train = args.train or write_sample(os.path.join(args.output_dir, "tickets.csv"))
task = kerasbert.Task("tickets", "classes", train_file=os.path.abspath(train),
                      dev_file=os.path.abspath(args.dev or train), text=args.text, label=args.label)
config = kerasbert.FinetuneConfig(tasks={"tickets": task}, train=kerasbert.TrainConfig(
    batch_size=16, total_steps=args.steps, steps_per_block=30, learning_rate=1e-4))
run_dir, export_base = os.path.join(args.output_dir, "run"), os.path.join(args.output_dir, "export")
try:  # a file's error (a missing column, a dev label the training file lacks): one line, before TensorFlow loads
    kerasbert.load_examples(kerasbert.read_training_file(task, task.train_file)[0], task.dev_file)
    metrics = kerasbert.run_finetuning(config, ".", run_dir, args.init_checkpoint or kerasbert.minilm_checkpoint())
except kerasbert.DataError as error:
    raise SystemExit(f"error: {error}")
version = kerasbert.export_saved_model(run_dir, export_base)
print(f"dev accuracy {metrics['tickets_accuracy']:.3f}; exported {version}")

from serving.process import LocalServer  # noqa: E402 (TF Serving's REST API, on 127.0.0.1)

with LocalServer("tickets", export_base) as server:
    server.wait_for_version(int(os.path.basename(version)))
    request = {"signature_name": "tickets_classify", "examples": [{"text": "refund the double charge"},
                                                                 {"text": "it crashes when I save"}]}
    url = f"http://127.0.0.1:{server.rest_port}/v1/models/tickets:classify"
    answer = json.loads(urllib.request.urlopen(urllib.request.Request(url, json.dumps(request).encode())).read())
for example, classes in zip(request["examples"], answer["results"]):
    best = max(classes, key=lambda pair: pair[1])
    print(f"{example['text']!r}: {best[0]} ({best[1]:.2f})")
