"""Pretrain a BERT with your own `model.fit`: masked-LM + next-sentence prediction on text files.

    python examples/pretrain_fit.py --text ../shared/data/wikitext-2/valid.txt --output_dir runs/my-bert
    python examples/pretrain_fit.py --text my_corpus.txt --init_checkpoint runs/my-bert --output_dir runs/more

A text file holds documents separated by blank lines. A fresh encoder has a size preset
and a WordPiece vocabulary trained on the text; --init_checkpoint continues a checkpoint
instead (a Hugging Face BERT folder, a keras-hub preset, or an --output_dir of this script).
Killed part-way, the same command resumes from the last epoch's backup.
"""

import argparse
import os
import sys

import kerasbert

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--text", action="append", required=True, help="A text file to train on (repeatable).")
parser.add_argument("--heldout_text", help="A text file to score after every epoch (validation).")
parser.add_argument("--output_dir", required=True, help="Where the encoder, the model, logs and backups go.")
parser.add_argument("--preset", default="tiny", help="Size of a fresh encoder: tiny, mini, small, medium, base.")
parser.add_argument("--vocab_size", type=int, default=8000, help="Vocabulary size of a fresh encoder.")
parser.add_argument("--init_checkpoint", help="Continue this checkpoint (encoder and vocabulary).")
parser.add_argument("--sequence_length", type=int, default=128, help="Tokens per example.")
parser.add_argument("--batch_size", type=int, default=32, help="Examples per step.")
parser.add_argument("--steps_per_epoch", type=int, default=100, help="Steps between backups.")
parser.add_argument("--epochs", type=int, default=3, help="Epochs to train.")
parser.add_argument("--learning_rate", type=float, default=1e-4, help="AdamW learning rate.")
args = parser.parse_args()
if os.path.isfile(args.output_dir):  # else a TensorFlow error after the first epoch
    parser.error(f"--output_dir {args.output_dir} is a file, not a folder")
# After the flags, so that --help answers before TensorFlow loads; oneDNN kernels, on AVX2 CPUs too.
kerasbert.prefer_onednn()
import keras  # noqa: E402

data_config = kerasbert.PretrainDataConfig()  # 15% masked (80/10/10), half the B segments random
batches = dict(sequence_length=args.sequence_length, batch_size=args.batch_size, data=data_config)
try:  # a missing or damaged file: one line naming it
    if args.init_checkpoint:
        tokenizer = kerasbert.load_tokenizer(args.init_checkpoint)
        encoder = kerasbert.load_encoder(args.init_checkpoint)
    else:
        lines = [line for path in args.text for line in open(path, encoding="utf-8") if line.strip()]
        tokenizer = kerasbert.make_tokenizer(kerasbert.train_vocabulary(lines, args.vocab_size))
        encoder = kerasbert.build_encoder(args.preset, vocabulary_size=tokenizer.vocabulary_size())
    train = kerasbert.text_pretraining_dataset(args.text, tokenizer, **batches)
    heldout = (kerasbert.text_pretraining_dataset([args.heldout_text], tokenizer, heldout=True, **batches)
               if args.heldout_text else None)
except (kerasbert.DataError, OSError) as error:
    sys.exit(f"error: {error}")

model = kerasbert.BertPretrainer(encoder, mask_selection_length=data_config.mask_selection_length)
optimizer = kerasbert.FusedAdamW(args.learning_rate, weight_decay=0.01, clipnorm=1.0)
model.compile(**kerasbert.pretraining_compile_args(model, optimizer))
callbacks = [keras.callbacks.BackupAndRestore(os.path.join(args.output_dir, "backup")),
             keras.callbacks.TensorBoard(os.path.join(args.output_dir, "logs"))]
model.fit(train, steps_per_epoch=args.steps_per_epoch, epochs=args.epochs, validation_data=heldout,
          callbacks=callbacks)

# encoder/ is a keras-hub preset: kerasbert.load_encoder, pipelines.finetune, BertBackbone.from_preset take it.
for part in (encoder, tokenizer):
    part.save_to_preset(os.path.join(args.output_dir, "encoder"))
model.save(os.path.join(args.output_dir, "pretrainer.keras"))
print(f"saved {args.output_dir}/encoder and {args.output_dir}/pretrainer.keras")
