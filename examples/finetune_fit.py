"""Fine-tune one task with your own `model.fit`, score it, and export it for TF Serving.

    python examples/finetune_fit.py --task sts --train ../shared/data/cs224n/sts-train.tsv \
        --dev ../shared/data/cs224n/sts-dev.tsv --export_base saved_models/sts
    python examples/finetune_fit.py --task sst2 --train SST-2/train.tsv --dev SST-2/dev.tsv \
        --export_base saved_models/sst2

Task files: GLUE TSVs (sst2: sentence, label; para (QQP): question1, question2, is_duplicate;
sts (STS-B): sentence1, sentence2, score) or the shared data's cs224n files (sst: SST-5). The encoder starts
from --init_checkpoint: MiniLM by default, or a Hugging Face BERT folder, a keras-hub
preset, or a kerasbert run (pipelines.pretrain, examples/pretrain_fit.py).
"""

import argparse
import sys

import kerasbert

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--task", required=True, choices=kerasbert.task_names(),
                    help="sst: SST-5's 5 classes; sst2: positive/negative; para: paraphrase; sts: similarity 0-5")
parser.add_argument("--train", required=True, help="Training TSV of the task.")
parser.add_argument("--dev", required=True, help="Labelled TSV to score after training.")
parser.add_argument("--export_base", required=True, help="SavedModel versions go to <export_base>/<N>/.")
parser.add_argument("--init_checkpoint", help="Encoder to start from (default: the MiniLM checkpoint).")
parser.add_argument("--sequence_length", type=int, default=128, help="Tokens per packed example.")
parser.add_argument("--batch_size", type=int, default=32, help="Examples per step.")
parser.add_argument("--steps_per_epoch", type=int, default=100, help="Steps per epoch.")
parser.add_argument("--epochs", type=int, default=3, help="Epochs to train.")
parser.add_argument("--learning_rate", type=float, default=5e-5, help="AdamW learning rate.")
args = parser.parse_args()

try:  # a missing or damaged file: one line naming it, before TensorFlow loads
    examples = kerasbert.load_examples(args.task, args.train)
    kerasbert.load_examples(args.task, args.dev)
except kerasbert.DataError as error:
    sys.exit(f"error: {error}")
# After the flags and the files, so that --help and their errors answer before TensorFlow loads.
kerasbert.prefer_onednn()  # loads TensorFlow with its oneDNN kernels, on AVX2 CPUs too

checkpoint = args.init_checkpoint or kerasbert.minilm_checkpoint()
preprocessor = kerasbert.TaskPreprocessor(kerasbert.load_tokenizer(checkpoint), args.sequence_length,
                                          pair_encoder="cross")  # a pair is read as [CLS] a [SEP] b [SEP]
train = kerasbert.task_dataset(args.task, examples, preprocessor, args.batch_size, training=True)

model = kerasbert.MultitaskBert(kerasbert.load_encoder(checkpoint), tasks=(args.task,))
model.compile(optimizer=kerasbert.FusedAdamW(args.learning_rate, weight_decay=0.01))
model.fit(train, steps_per_epoch=args.steps_per_epoch, epochs=args.epochs)

print("dev:", kerasbert.score_file(model, preprocessor, args.task, args.dev))
# The task's signatures: text in (tokenized inside the graph), token ids in, and TF
# Serving's classify/regress; plus `embed`.
path = kerasbert.export_model(model, preprocessor, args.export_base)
print(f"exported {path}; serve it: python -m serving --model_name=NAME --model_base_path={args.export_base}")
