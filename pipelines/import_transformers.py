"""Import a fine-tuned transformers BERT as a kerasbert run folder.

    python -m pipelines.import_transformers --checkpoint DIR --output_dir RUN [--task NAME] [--pair]
        [--sequence_length N]

DIR is a transformers folder (config.json, model.safetensors or its sharded index, vocab.txt or
a WordPiece tokenizer.json, tokenizer_config.json) of BertForSequenceClassification,
BertForTokenClassification or BertForQuestionAnswering, or a hub id (hf://org/name) where
online. RUN is then a run like pipelines.finetune's: pipelines.evaluate, pipelines.export,
TextPredictor, batch_predict and the server take it. The task (default name: classifier, ner
or squad, whose signatures are classifier, entities and answer) is declared from the
checkpoint: class or tag names from id2label, a regression from num_labels 1.
"""

import sys
import time

from kerasbert.console import stage
from pipelines.common import main_guard, output_folder, pipeline_parser


def main(argv=None) -> int:
    parser = pipeline_parser("python -m pipelines.import_transformers", __doc__)
    parser.add_argument("--checkpoint", required=True,
                        help="A transformers BERT checkpoint folder with a task head, or hf://org/name.")
    parser.add_argument("--output_dir", required=True, type=output_folder,
                        help="The run folder to write (new, or empty).")
    parser.add_argument("--task", default=None,
                        help="The task's name, and its signatures' (default: classifier, ner or squad by the head).")
    parser.add_argument("--pair", action="store_true",
                        help="A sequence classifier of text pairs: its signatures take text_a and text_b.")
    parser.add_argument("--sequence_length", type=int, default=0,
                        help="Packed length (default: the config's max_position_embeddings, at most 512; never "
                             "more than it).")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    # At once: TensorFlow's import and the checkpoint's read take most of an import's first minute.
    stage(f"importing {args.checkpoint} into {args.output_dir} (loading TensorFlow, then the checkpoint)")

    def run():
        from kerasbert.hf.importing import import_transformers
        path = import_transformers(args.checkpoint, args.output_dir, args.task, args.pair, args.sequence_length)
        stage(f"imported {args.checkpoint} as {path}", started)

    return main_guard(run, verbose=args.verbose)


if __name__ == "__main__":
    sys.exit(main())
