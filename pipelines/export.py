"""Export a fine-tuned model as a versioned SavedModel for TensorFlow Serving.

    python -m pipelines.export --model_dir runs/finetune --export_base saved_models/kerasbert [--version N]
        [--precision {fp32,bf16,int8}] [--xla]
    python -m pipelines.export --model_dir runs/finetune --format transformers --export_base hf_models/NAME

Writes saved_models/kerasbert/<N>/ (default N: the next integer). Signatures, per task of
the run, named by its head: sentiment (= serving_default), paraphrase, similarity, and
their *_tokens and *_classify / *_regress variants; entities (ner: text -> entities with
character offsets) and answer (squad: question, context -> answer, answer_start,
answer_end, score) and their *_tokens variants; embed and embed_tokens. Every op of the
export is TensorFlow's or TF Text's, as the stock tensorflow_model_server has (printed; any
other is an `error:` line and no export: pipelines/audit_ops.py).
--format transformers writes each task as a transformers folder, <export_base>/<task>/, which
transformers.pipeline and AutoModelFor...from_pretrained load (kerasbert/hf/exporting.py).
"""

import sys
import time

from kerasbert.console import stage
from pipelines.common import main_guard, output_folder, pipeline_parser

PRECISIONS = {"fp32": "float32", "bf16": "bfloat16", "int8": "int8"}  # the encoder's compute dtypes


def main(argv=None) -> int:
    parser = pipeline_parser("python -m pipelines.export", __doc__)
    parser.add_argument("--model_dir", required=True, help="Output folder of pipelines.finetune.")
    parser.add_argument("--export_base", required=True, type=output_folder,
                        help="Model base path: versions are written as <export_base>/<N>/ (with --format "
                             "transformers: a folder per task, <export_base>/<task>/).")
    parser.add_argument("--format", default="saved_model", choices=("saved_model", "transformers"),
                        help="saved_model: for TF Serving; transformers: BertFor... folders for transformers.")
    parser.add_argument("--version", type=int, default=None,
                        help="Version number (default: one more than the highest present).")
    parser.add_argument("--precision", "--compute_dtype", dest="precision", default="fp32",
                        choices=(*PRECISIONS, *PRECISIONS.values()),
                        help="Type of the encoder's matrix products when served. bf16 (bfloat16): about 1.5x "
                             "throughput on CPUs with AVX512-BF16 or AMX, embeddings within a cosine of "
                             "0.9999; the projections' kernels stored as bfloat16 copies. int8: int8 weights and oneDNN's quantized "
                             "kernels (kerasbert/quantize.py; docs/benchmarks.md for speed and accuracy).")
    parser.add_argument("--xla", action="store_true",
                        help="fp32 only: a one-sentence request's encoder runs compiled by XLA, its tokens "
                             "padded to 16/32/64/128 (kerasbert/models/bucketed.py); TF Serving's binary "
                             "then needs --xla_cpu_compilation_enabled.")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    # At once: TensorFlow's import and the run's load take most of an export's first minute.
    stage(f"exporting {args.model_dir} under {args.export_base} (loading TensorFlow, then the run)")

    def run():
        if args.format == "transformers":
            from kerasbert.hf.exporting import export_transformers
            for task, folder in export_transformers(args.model_dir, args.export_base).items():
                print(f"== exported {task} as {folder}")
            return
        from kerasbert.export import export_saved_model
        from kerasbert.op_audit import audit_ops
        path = export_saved_model(args.model_dir, args.export_base, args.version,
                                  PRECISIONS.get(args.precision, args.precision), xla=args.xla)
        stage(f"exported {path}", started)
        print(f"== {audit_ops(path).summary()}")  # export refused any other (pipelines.audit_ops)

    return main_guard(run, verbose=args.verbose)


if __name__ == "__main__":
    sys.exit(main())
