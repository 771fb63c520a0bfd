"""What every pipeline shares: its parser, the run flags, and `main_guard` (quiet start-up,
clear errors, exit codes).

Example:
    >>> parser = pipeline_parser("python -m pipelines.pretrain", __doc__)
    >>> add_common_flags(parser)
    >>> args = parser.parse_args()
    >>> sys.exit(main_guard(lambda: train(args), verbose=args.verbose))
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import tempfile

from kerasbert.cpu_kernels import prefer_onednn
from kerasbert.data.corpus import default_data_dir


CONFIG_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs")


def config_path(path: str) -> str:
    """`path` as given if it exists; else, for `pipelines/configs/NAME` or a bare NAME, the
    config shipped with the package (so the documented paths work outside the clone too)."""
    if os.path.exists(path):
        return path
    shipped = os.path.join(CONFIG_DIR, os.path.basename(path))
    return shipped if os.path.isfile(shipped) else path


def pipeline_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """An argument parser with the pipeline's docstring as its help and a `--verbose` flag."""
    parser = argparse.ArgumentParser(prog=prog, description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--verbose", action="store_true",
                        help="Show TensorFlow's C++ start-up lines (device, CUDA and oneDNN notices), "
                             "hidden by default on machines without an NVIDIA GPU.")
    return parser


def add_common_flags(parser: argparse.ArgumentParser, config_required: bool = True) -> None:
    parser.add_argument("--config", required=config_required, type=config_path,
                        help="JSON config file (see pipelines/configs/).")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="Override one field of the resolved config, e.g. "
                             "--set train.total_steps=400. Repeatable.")
    parser.add_argument("--data_dir", default=default_data_dir(),
                        help="Folder holding cs224n/ and wikitext-2/ (default: $KERASBERT_DATA_DIR "
                             "or ../shared/data).")
    parser.add_argument("--output_dir", required=True,
                        help="Folder for every output of the run. Holding a finished run, it is left "
                             "as it is (see --overwrite); holding a killed one, the run resumes.")
    parser.add_argument("--overwrite", action="store_true",
                        help="Remove the outputs of a previous run in --output_dir (finished or not) "
                             "and train from scratch.")
    parser.add_argument("--init_checkpoint", default=None,
                        help="Start from this checkpoint: a kerasbert output folder, a keras-hub "
                             "preset (folder or handle), or a Hugging Face BERT folder.")
    parser.add_argument("--strategy", default="default",
                        choices=("default", "mirrored", "multi_worker", "tpu"),
                        help="tf.distribute strategy. multi_worker reads TF_CONFIG.")
    parser.add_argument("--cpu_devices", type=int, default=0,
                        help="With --strategy mirrored on a CPU-only host: split the CPU into this "
                             "many logical devices (for testing).")


def has_nvidia_gpu() -> bool:
    return os.path.exists("/dev/nvidiactl")


@contextlib.contextmanager
def native_stderr_to(file):
    """Sends what C++ libraries write to file descriptor 2 into `file` (a binary file)."""
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(file.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def import_tensorflow(verbose: bool = False) -> None:
    """Imports TensorFlow and looks up its devices, hiding the C++ start-up lines unless
    `verbose` or an NVIDIA GPU is present (then they say which devices it found).

    Without a GPU they say nothing: "Could not find cuda drivers", "failed call to cuInit",
    "oneDNN custom operations are on". They are written before TF_CPP_MIN_LOG_LEVEL is
    read, so only a redirect of the native stderr hides them. Looking the devices up
    does not fix them: a strategy may still split the CPU afterwards.

    Asks for TensorFlow's oneDNN kernels as it loads (`kerasbert.cpu_kernels`), on CPUs
    where TensorFlow would leave them off, unless TF_ENABLE_ONEDNN_OPTS says otherwise.
    """
    if verbose or has_nvidia_gpu() or "tensorflow" in sys.modules:
        prefer_onednn()
        return
    # Also the C++ errors that are notices here ("oneDNN supports DT_INT64 only on platforms
    # with AVX-512"); a real failure still reaches Python as an exception.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    with tempfile.TemporaryFile() as captured:
        try:
            with native_stderr_to(captured):
                prefer_onednn()
                import tensorflow as tf

                tf.config.list_physical_devices()
        except BaseException:
            captured.seek(0)
            sys.stderr.write(captured.read().decode("utf-8", "replace"))  # why it failed
            raise


def main_guard(run, verbose: bool = False) -> int:
    """Runs `run()` after a quiet TensorFlow start-up, turning expected errors into one
    clear line and exit code 2."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    signal.signal(signal.SIGTERM, _interrupt)  # a SIGTERM unwinds as Ctrl-C does: backups stay whole
    try:
        import_tensorflow(verbose)
        run()
    except (ValueError, FileNotFoundError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as interrupt:  # training says where it resumes; elsewhere, nothing was kept
        message = str(interrupt) if type(interrupt) is not KeyboardInterrupt else "interrupted"
        print(f"\n{message}", file=sys.stderr)
        return 130
    return 0


def _interrupt(signum, frame):
    raise KeyboardInterrupt
