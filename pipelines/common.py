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
import logging
import os
import signal
import sys

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


class MissingDependency(ValueError):
    """An optional dependency is not installed (one `error:` line, exit 2, as for bad input)."""


def require(*modules: str, extra: str = "beam") -> None:
    """A clear error when an optional dependency is missing: the extra that installs it."""
    import importlib.util

    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if missing:
        raise MissingDependency(f"{', '.join(missing)} not installed: pip install 'kerasbert[{extra}]' "
                          "(or pip install -r requirements.txt)")


def main_guard(run, verbose: bool = False) -> int:
    """Runs `run()` after a quiet TensorFlow start-up, turning expected errors into one
    clear line and exit code 2."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    signal.signal(signal.SIGTERM, _interrupt)  # a SIGTERM unwinds as Ctrl-C does: backups stay whole
    try:
        prefer_onednn(verbose)  # quiet unless verbose (kerasbert.quiet)
        run()
    except (ValueError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as interrupt:  # training says where it resumes; elsewhere, nothing was kept
        message = str(interrupt) if type(interrupt) is not KeyboardInterrupt else "interrupted"
        print(f"\n{message}", file=sys.stderr)
        return 130
    return 0


def _interrupt(signum, frame):
    raise KeyboardInterrupt
