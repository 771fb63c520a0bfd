"""The batch inference pipeline: files -> rows -> RunInference -> sharded results.

Example:
    >>> config = BatchPredictConfig("saved_models/kerasbert/3", "embed", "questions/*.txt", "out/embed")
    >>> counts = run_batch_predict(config, ["--runner=DirectRunner", "--direct_num_workers=2",
    ...                                     "--direct_running_mode=multi_processing"])
    >>> counts
    {'read': 20000, 'scored': 19998, 'refused': 2}
"""

from __future__ import annotations

import dataclasses
import json
import os

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.ml.inference.base import KeyedModelHandler, RunInference
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions

from kerasbert.batch.handler import NAMESPACE, SavedModelSignatureHandler, set_tensorflow_threads
from kerasbert.batch.records import SUFFIXES, counts_path, dead_letter_path, json_line, results_pattern, tf_example
from kerasbert.batch.rows import Refused, read_rows
from kerasbert.batch.signatures import string_inputs
from kerasbert.quiet import hide_library_logs, native_stderr_hidden

COUNTS = ("read", "scored", "refused")


@dataclasses.dataclass(frozen=True)
class BatchPredictConfig:
    model_dir: str  # an exported version folder: <export_base>/<N>
    signature: str  # one of its text signatures: sentiment, paraphrase, similarity, embed, ...
    input: str  # a glob of input files (any Beam file system)
    output: str  # the prefix of the result shards
    output_format: str = "jsonl"  # or "tfrecord"
    min_batch_size: int = 1
    max_batch_size: int = 64
    overwrite: bool = False

    def __post_init__(self):
        if self.output_format not in SUFFIXES:
            raise ValueError(f"output_format must be one of {tuple(SUFFIXES)}. Received: {self.output_format!r}")
        if not 1 <= self.min_batch_size <= self.max_batch_size:
            raise ValueError(f"need 1 <= min_batch_size <= max_batch_size. Received: {self.min_batch_size}, "
                             f"{self.max_batch_size}")


def existing_outputs(config: BatchPredictConfig) -> list[str]:
    patterns = [results_pattern(config.output, fmt) for fmt in SUFFIXES]
    patterns += [dead_letter_path(config.output), counts_path(config.output)]
    return [metadata.path for result in FileSystems.match(patterns) for metadata in result.metadata_list]


class ReadRows(beam.DoFn):
    """A matched file -> its rows (main output) and refused rows (tagged `refused`)."""

    def __init__(self, input_names: tuple[str, ...], threads: int | None = None):
        self.input_names, self.threads = input_names, threads
        self.read = Metrics.counter(NAMESPACE, "read")
        self.refused = Metrics.counter(NAMESPACE, "refused")

    def setup(self):
        set_tensorflow_threads(self.threads)  # TFRecord input may start TensorFlow before the model

    def process(self, readable_file: fileio.ReadableFile):
        path = readable_file.metadata.path
        for row in read_rows(path, self.input_names, readable_file.read):
            self.read.inc()
            if isinstance(row, Refused):
                self.refused.inc()
                yield beam.pvalue.TaggedOutput("refused", json.dumps(dataclasses.asdict(row), ensure_ascii=False))
            else:
                yield row.id, row.inputs


class FormatResult(beam.DoFn):
    def __init__(self, output_format: str):
        self.output_format = output_format
        self.scored = Metrics.counter(NAMESPACE, "scored")

    def process(self, keyed_result):
        row_id, result = keyed_result
        self.scored.inc()
        format_row = json_line if self.output_format == "jsonl" else tf_example
        yield format_row(row_id, result.example, result.inference)


def threads_per_worker(options: PipelineOptions) -> int | None:
    """The cores of this machine shared among the direct runner's worker processes (None:
    workers on their own machines, or in this process, take every core)."""
    direct = options.view_as(DirectOptions)
    workers = direct.direct_num_workers or 1
    if direct.direct_running_mode != "multi_processing" or workers <= 1:
        return None
    return max(1, (os.cpu_count() or 1) // workers)


def build_pipeline(pipeline: beam.Pipeline, config: BatchPredictConfig) -> None:
    threads = threads_per_worker(pipeline.options)
    handler = SavedModelSignatureHandler(config.model_dir, config.signature, config.min_batch_size,
                                         config.max_batch_size, threads)
    rows = (pipeline
            | "Match" >> fileio.MatchFiles(config.input)
            | "Open" >> fileio.ReadMatches()
            | "Rows" >> beam.ParDo(ReadRows(handler.input_names, threads)).with_outputs("refused", main="rows"))
    results = (rows.rows
               | "Spread" >> beam.Reshuffle()  # one big file's rows over all the workers, not the reader's alone
               | "Score" >> RunInference(KeyedModelHandler(handler))
               | "Format" >> beam.ParDo(FormatResult(config.output_format)))
    suffix = SUFFIXES[config.output_format]
    if config.output_format == "jsonl":
        results | "Write" >> beam.io.WriteToText(config.output, file_name_suffix=suffix)
    else:
        results | "Write" >> beam.io.WriteToTFRecord(config.output, file_name_suffix=suffix)
    rows.refused | "DeadLetter" >> beam.io.WriteToText(dead_letter_path(config.output), shard_name_template="")


def pipeline_options(beam_args: list[str] | None, verbose: bool = False) -> PipelineOptions:
    """Beam's options from the command line's remaining arguments. Unless `verbose`, Beam's
    own log lines below ERROR are dropped in this process, and its worker processes log
    errors only (a log level given in `beam_args` is kept)."""
    hide_library_logs("apache_beam", verbose)
    beam_args = list(beam_args or [])
    if not verbose and not any(arg.startswith("--default_sdk_harness_log_level") for arg in beam_args):
        beam_args.append("--default_sdk_harness_log_level=ERROR")
    return PipelineOptions(beam_args)


def run_pipeline(pipeline: beam.Pipeline, verbose: bool = False):
    """Runs `pipeline` to the end. Unless `verbose`, what worker processes write to stderr
    before their logging is set up (the harness's start-up lines) is hidden, and shown if
    the run fails."""
    with native_stderr_hidden(verbose):
        result = pipeline.run()
        result.wait_until_finish()
    return result


def run_batch_predict(config: BatchPredictConfig, beam_args: list[str] | None = None,
                      verbose: bool = False) -> dict[str, int]:
    """Runs the pipeline with Beam's options `beam_args` (runner and its settings); returns
    and writes `<output>.counts.json`: rows read, scored and refused."""
    string_inputs(config.model_dir, config.signature)  # a signature it cannot call: refused before any work
    existing = existing_outputs(config)
    if existing and not config.overwrite:
        raise FileExistsError(f"{config.output}: results of an earlier run are there ({existing[0]}, "
                              f"{len(existing)} files); pass --overwrite to replace them")
    if existing:
        FileSystems.delete(existing)
    if not FileSystems.match([config.input])[0].metadata_list:
        raise FileNotFoundError(f"{config.input}: no input file matches")
    pipeline = beam.Pipeline(options=pipeline_options(beam_args, verbose))
    build_pipeline(pipeline, config)
    result = run_pipeline(pipeline, verbose)
    counters = result.metrics().query(MetricsFilter().with_namespace(NAMESPACE))["counters"]
    counts = {name: 0 for name in COUNTS}
    for counter in counters:
        if counter.key.metric.name in counts:
            counts[counter.key.metric.name] += counter.committed
    with FileSystems.create(counts_path(config.output)) as f:
        f.write(json.dumps(counts, indent=2).encode() + b"\n")
    return counts
