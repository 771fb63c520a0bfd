"""Keras `fit` on your own tf.data: rows of (text, label) from anywhere (here a CSV read by tf.data),
mapped through kerasbert's preprocessor, trained with `model.fit`, exported for TF Serving.

    python examples/fit_own_dataset.py --csv my.csv --text body --label category --export_base saved_models/mine
    python examples/fit_own_dataset.py --export_base saved_models/tickets   # writes a small CSV and uses it

`preprocessor(task, text, text_b)`: a batch of strings and, for a one-text task, as many empty ones;
it returns the model's inputs and `task`, the task's id. The label: float32, the class index in the
task's class order (or the score of a score task). docs/training.md#keras-fit-on-your-own-tfdata."""

import argparse
import csv
import os
import sys
import tempfile

import kerasbert

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--csv", help="Training CSV with a header (default: a small one this script writes).")
parser.add_argument("--text", default="text", help="The text column.")
parser.add_argument("--label", default="label", help="The label column (any values: they become the classes).")
parser.add_argument("--export_base", required=True, help="SavedModel versions go to <export_base>/<N>/.")
parser.add_argument("--init_checkpoint", help="Encoder to start from (default: the MiniLM checkpoint).")
parser.add_argument("--steps", type=int, default=60, help="Training steps.")
args = parser.parse_args()

path = args.csv or os.path.join(tempfile.mkdtemp(), "tickets.csv")
if not args.csv:  # support tickets in three categories, made up
    topics = {"billing": "refund my last payment", "bug": "the app crashes on start", "account": "I cannot log in"}
    with open(path, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([["text", "label"]] + [[f"{text}, ticket {i}", label] for i in range(20)
                                                       for label, text in topics.items()])
try:  # the classes: the file's labels, sorted (or declared: Task(..., class_names=(...)))
    task = kerasbert.read_training_file(kerasbert.Task("tickets", "classes", text=args.text, label=args.label),
                                        path)[0]
except kerasbert.DataError as error:
    sys.exit(f"error: {error}")
kerasbert.prefer_onednn()  # loads TensorFlow, after the flags and the file answered
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

checkpoint = args.init_checkpoint or kerasbert.minilm_checkpoint()
preprocessor = kerasbert.TaskPreprocessor(kerasbert.load_tokenizer(checkpoint), sequence_length=64)
class_index = keras.layers.StringLookup(vocabulary=list(task.settings.label_values), num_oov_indices=0)


def model_inputs(row):
    text = row[args.text]  # (batch,) strings
    x = preprocessor(task, text, tf.fill(tf.shape(text), ""))  # token_ids, ..., task: the task's id
    return x, tf.cast(class_index(row[args.label]), tf.float32)  # (batch,) class indices


rows = tf.data.experimental.make_csv_dataset(path, batch_size=8, select_columns=[args.text, args.label],
                                             column_defaults=["", ""], shuffle_seed=0, num_epochs=None)
model = kerasbert.MultitaskBert(kerasbert.load_encoder(checkpoint), tasks=(task,), pooling="cls")  # cls: transformers too
model.compile(optimizer=kerasbert.FusedAdamW(1e-4, weight_decay=0.01))
model.fit(rows.map(model_inputs), steps_per_epoch=args.steps, epochs=1)
version = kerasbert.export_model(model, preprocessor, args.export_base)  # signatures tickets, tickets_classify, ...
answer = kerasbert.TextPredictor(model, preprocessor).predict("tickets", ["refund the double charge"])
print(f"classes {list(task.settings.served_names)}; 'refund the double charge': "
      f"{answer['class_name'][0].decode()}; exported {version}")
