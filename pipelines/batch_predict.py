r"""Score or embed many files with an exported SavedModel, on Apache Beam.

    python -m pipelines.batch_predict --model_dir saved_models/kerasbert/3 --signature embed \
        --input "questions/*.txt" --output runs/embed/questions \
        --direct_num_workers 2 --direct_running_mode multi_processing

Inputs (--input, a glob on any Beam file system): text files (one sentence a line; a pair
signature takes `text_a<TAB>text_b`), task TSVs (CS224N or GLUE layouts) or TFRecords of
tf.Examples with bytes features named as the signature's inputs. Each row is keyed
`<file>:<line>`. Results: `<output>-00000-of-0000N.jsonl`, one line per row,
{"id", "inputs", "outputs"} (or tf.Examples with --output_format tfrecord); rows that
cannot be scored go to `<output>.dead-letter.jsonl` with their reason, and the job goes on;
the counts of rows read, scored, refused and empty are printed and written to `<output>.counts.json`.

Beam's options pass through: --runner (DirectRunner by default; DataflowRunner, FlinkRunner,
SparkRunner with their own options, e.g. --project, --region, --temp_location for
Dataflow), --direct_num_workers, --direct_running_mode.
"""

import sys

from pipelines.common import main_guard, pipeline_parser, require


def main(argv=None) -> int:
    parser = pipeline_parser("python -m pipelines.batch_predict", __doc__)
    parser.add_argument("--model_dir", required=True, help="An exported version folder: <export_base>/<N>.")
    parser.add_argument("--signature", default="embed",
                        help="A text signature of the export: sentiment, paraphrase, similarity, embed, ... "
                             "(default embed).")
    parser.add_argument("--input", required=True, help="Glob of input files (text, .tsv or .tfrecord).")
    parser.add_argument("--output", required=True, help="Prefix of the result shards (a prefix, never a glob).")
    parser.add_argument("--output_format", default="jsonl", choices=("jsonl", "tfrecord"),
                        help="JSON lines (default) or TFRecords of tf.Example.")
    parser.add_argument("--min_batch_size", type=int, default=1, help="Smallest batch RunInference forms.")
    parser.add_argument("--max_batch_size", type=int, default=64, help="Largest batch RunInference forms.")
    parser.add_argument("--overwrite", action="store_true",
                        help="Replace the results of an earlier run with this prefix (its files only).")
    args, beam_args = parser.parse_known_args(argv)

    def run():
        require("apache_beam")
        from kerasbert.quiet import hide_library_logs

        hide_library_logs("apache_beam", args.verbose)  # before Beam's import logs its first lines
        from kerasbert.batch.pipeline import BatchPredictConfig, run_batch_predict
        from kerasbert.batch.records import counts_path

        config = BatchPredictConfig(args.model_dir, args.signature, args.input, args.output, args.output_format,
                                    args.min_batch_size, args.max_batch_size, args.overwrite)
        counts = run_batch_predict(config, beam_args, args.verbose)
        print(f"== rows read {counts['read']:,}, scored {counts['scored']:,}, refused {counts['refused']:,}, "
              f"empty {counts['empty']:,} (written to {counts_path(args.output)})")

    return main_guard(run, verbose=args.verbose)


if __name__ == "__main__":
    sys.exit(main())
