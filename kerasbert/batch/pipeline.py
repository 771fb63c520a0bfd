"""The batch inference pipeline: files -> rows -> RunInference -> sharded results.

Example:
    >>> config = BatchPredictConfig(export_dir, "embed", sentences_file, f"{tmp_path}/out/embed")
    >>> run_batch_predict(config, ["--runner=DirectRunner"])  # a real job: --direct_num_workers=2 ...
    {'read': 4, 'scored': 4, 'refused': 0, 'empty': 0}
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import re
import stat
import tempfile
import uuid

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.io.filesystem import FileSystem
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.ml.inference.base import KeyedModelHandler, RunInference
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions

from kerasbert.beam_runs import pipeline_options, run_pipeline
from kerasbert.errors import ConfigError
from kerasbert.batch.handler import NAMESPACE, ModelRefusal, SavedModelSignatureHandler, set_tensorflow_threads
from kerasbert.batch.records import (SUFFIXES, check_prefix, counts_path, dead_letter_path, is_own_output, json_line,
                                     tf_example)
from kerasbert.batch.input_rows import Empty, Refused, read_rows
from kerasbert.batch.signatures import string_inputs

COUNTS = ("read", "scored", "refused", "empty")  # read = scored + refused + empty


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
            raise ConfigError(f"output_format must be one of {tuple(SUFFIXES)}. Received: {self.output_format!r}")
        if not 1 <= self.min_batch_size <= self.max_batch_size:
            raise ConfigError(f"need 1 <= min_batch_size <= max_batch_size. Received: {self.min_batch_size}, "
                             f"{self.max_batch_size}")
        check_prefix(self.output)


def own_outputs(prefix: str) -> tuple[list[str], list[str]]:
    """(result files, Beam temp folders) that a run with `prefix` wrote: only what the
    prefix names (records.is_own_output), never another run's files beside them."""
    directory, base = FileSystems.split(prefix)
    files = sorted({metadata.path for result in FileSystems.match([prefix + "*"]) for metadata in result.metadata_list
                    if is_own_output(prefix, metadata.path)})
    temp = FileSystems.join(directory, f"beam-temp-{base}")
    if _is_local(prefix):  # Beam's local matches list no folders
        folders = glob.glob(glob.escape(temp) + "*")
    else:  # folders are the names of the files in them
        folders = {FileSystems.join(directory, metadata.path[len(directory):].lstrip("/").split("/", 1)[0])
                   for result in FileSystems.match([temp + "*/*"]) for metadata in result.metadata_list}
    return files, sorted(folder for folder in folders if is_own_output(prefix, folder))


def staging_prefix(prefix: str) -> str:
    """Where the shards are written first: `DIR/beam-temp-BASE-<uuid>/BASE`. Beam's sink
    deletes every file matching `PREFIX*-of-N.jsonl` before it renames its own into place,
    which beside `PREFIX` would take another run's `PREFIX-2-00000-of-00001.jsonl`; in a
    folder of its own it takes nothing."""
    directory, base = FileSystems.split(prefix)
    return FileSystems.join(FileSystems.join(directory, f"beam-temp-{base}-{uuid.uuid4().hex}"), base)


def publish(staged: str, prefix: str) -> None:
    """Moves the shards written under `staged` to the same names under `prefix`, then
    removes the staging folder."""
    shards = [metadata.path for result in FileSystems.match([staged + "*"]) for metadata in result.metadata_list
              if is_own_output(staged, metadata.path)]
    FileSystems.rename(shards, [prefix + path[len(staged):] for path in shards])
    FileSystems.delete([FileSystems.split(staged)[0]])


def _is_local(path: str) -> bool:
    return FileSystems.get_scheme(path) is None


_NOT_REGULAR = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                (stat.S_ISSOCK, "a socket"))


def check_input(pattern: str, prefix: str | None = None) -> None:
    """One line for an input that cannot be read: nothing matches, a folder was given, or a
    file that is not a regular one (a FIFO waits for ever; a link to /dev/zero never ends);
    or, with the output `prefix`, one whose results --input would read back: a prefix in the
    folder the glob reads (a second run scored the first run's results)."""
    matched = [metadata.path for metadata in FileSystems.match([pattern])[0].metadata_list]
    if not matched:
        raise FileNotFoundError(f"{pattern}: no input file matches")
    local = [path for path in matched if _is_local(path)]
    folders = [path for path in local if os.path.isdir(path)]
    if folders:
        raise IsADirectoryError(f"{folders[0]}: --input is a folder; give its files, e.g. {folders[0]}/*")
    for path in local:
        mode = os.stat(path).st_mode  # a link's target's
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _NOT_REGULAR if test(mode)), "not a file")
            raise ConfigError(f"{path}: --input is {kind}, not a regular file; give files")
    if prefix is not None and _is_local(pattern) and _is_local(prefix):
        reads = re.compile(FileSystem.translate_pattern(os.path.abspath(pattern))).match
        shards = [f"{prefix}-00000-of-00001{suffix}" for suffix in SUFFIXES.values()]
        for written in shards + [dead_letter_path(prefix), counts_path(prefix)]:
            if reads(os.path.abspath(written)):
                raise ConfigError(f"{prefix}: --output is inside the input folder: --input {pattern} would read "
                                  f"this run's results ({os.path.basename(written)}) in the next run; write "
                                  "them elsewhere")


def check_output(prefix: str) -> None:
    """One line if results cannot be written under `prefix` (its folder is a file, or on a
    file system that takes no files, such as /proc): the folder is made and a file tried."""
    if not _is_local(prefix):
        return  # a remote file system answers for itself when the job writes
    directory = os.path.dirname(os.path.abspath(prefix))
    try:
        os.makedirs(directory, exist_ok=True)
        descriptor, probe = tempfile.mkstemp(prefix=".batch-predict-", dir=directory)
        os.close(descriptor)
        os.remove(probe)
    except OSError as error:
        raise ConfigError(f"{prefix}: results cannot be written there ({error.strerror}: "
                      f"{error.filename or directory})") from None


class ReadRows(beam.DoFn):
    """A matched file -> its rows (main output) and refused rows (tagged `refused`)."""

    def __init__(self, input_names: tuple[str, ...], threads: int | None = None):
        self.input_names, self.threads = input_names, threads
        self.read = Metrics.counter(NAMESPACE, "read")
        self.refused = Metrics.counter(NAMESPACE, "refused")
        self.empty = Metrics.counter(NAMESPACE, "empty")

    def setup(self):
        set_tensorflow_threads(self.threads)  # TFRecord input may start TensorFlow before the model

    def process(self, readable_file: fileio.ReadableFile):
        path = readable_file.metadata.path
        for row in read_rows(path, self.input_names, readable_file.read):
            self.read.inc()
            if isinstance(row, Empty):
                self.empty.inc()
            elif isinstance(row, Refused):
                self.refused.inc()
                yield beam.pvalue.TaggedOutput("refused", json.dumps(dataclasses.asdict(row), ensure_ascii=False))
            else:
                yield row.id, row.inputs


class FormatResult(beam.DoFn):
    """A scored row as a result line or record; a row the model refused (`ModelRefusal`)
    to the dead letters (tagged `refused`), counted as refused."""

    def __init__(self, output_format: str):
        self.output_format = output_format
        self.scored = Metrics.counter(NAMESPACE, "scored")
        self.refused = Metrics.counter(NAMESPACE, "refused")

    def process(self, keyed_result):
        row_id, result = keyed_result
        if isinstance(result.inference, ModelRefusal):
            self.refused.inc()
            yield beam.pvalue.TaggedOutput("refused", json.dumps(
                {"id": row_id, "reason": f"the model refused it: {result.inference}"}, ensure_ascii=False))
            return
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


def build_pipeline(pipeline: beam.Pipeline, config: BatchPredictConfig, results_prefix: str | None = None) -> None:
    """Read, score and write; the result shards go under `results_prefix` (default: the
    config's output prefix), the dead letters beside the output prefix."""
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
               | "Format" >> beam.ParDo(FormatResult(config.output_format)).with_outputs("refused", main="results"))
    suffix = SUFFIXES[config.output_format]
    results_prefix = results_prefix or config.output
    if config.output_format == "jsonl":
        results.results | "Write" >> beam.io.WriteToText(results_prefix, file_name_suffix=suffix)
    else:
        results.results | "Write" >> beam.io.WriteToTFRecord(results_prefix, file_name_suffix=suffix)
    ((rows.refused, results.refused) | "Refused" >> beam.Flatten()
     | "DeadLetter" >> beam.io.WriteToText(dead_letter_path(config.output), shard_name_template=""))


def run_batch_predict(config: BatchPredictConfig, beam_args: list[str] | None = None,
                      verbose: bool = False) -> dict[str, int]:
    """Runs the pipeline with Beam's options `beam_args` (runner and its settings); returns
    and writes `<output>.counts.json`: lines (or records) read, scored, refused and empty."""
    check_input(config.input, config.output)
    check_output(config.output)
    string_inputs(config.model_dir, config.signature)  # a signature it cannot call: refused before any work
    existing, temp_folders = own_outputs(config.output)
    if existing and not config.overwrite:
        raise FileExistsError(f"{config.output}: results of an earlier run are there ({existing[0]}, "
                              f"{len(existing)} files); pass --overwrite to replace them")
    if config.overwrite and existing + temp_folders:
        FileSystems.delete(existing + temp_folders)
    pipeline = beam.Pipeline(options=pipeline_options(beam_args, verbose))
    staged = staging_prefix(config.output)
    build_pipeline(pipeline, config, staged)
    result = run_pipeline(pipeline, verbose)
    publish(staged, config.output)
    counters = result.metrics().query(MetricsFilter().with_namespace(NAMESPACE))["counters"]
    counts = {name: 0 for name in COUNTS}
    for counter in counters:
        if counter.key.metric.name in counts:
            counts[counter.key.metric.name] += counter.committed
    with FileSystems.create(counts_path(config.output)) as f:
        f.write(json.dumps(counts, indent=2).encode() + b"\n")
    return counts
