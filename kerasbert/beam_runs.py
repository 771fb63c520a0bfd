"""Running a Beam pipeline from a kerasbert command: batch inference (kerasbert/batch/) and
pretraining's example shards (kerasbert/pretraining/beam_data.py) both take Beam's options
from the command line's remaining arguments and run quietly unless asked to be verbose.

Example:
    >>> import apache_beam as beam
    >>> pipeline = beam.Pipeline(options=pipeline_options(["--runner=DirectRunner"]))
    >>> _ = pipeline | beam.Create([1, 2, 3]) | beam.Map(lambda x: x * 2)
    >>> run_pipeline(pipeline).state
    'DONE'
"""

from __future__ import annotations

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from kerasbert.quiet import hide_library_logs, native_stderr_hidden


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
