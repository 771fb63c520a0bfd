"""What every pipeline shares: its parser, the run flags, and `main_guard` (quiet start-up,
clear errors, exit codes).

`main_guard` tells bad input from bugs. An expected failure (`kerasbert.KerasbertError`:
a bad config value, a damaged data file, no readable backup, a run gone non-finite, a
missing optional dependency) or an OS error a user's path or disk causes (a file missing
or already there, no permission, a full disk) is one `error:` line and exit 2. Anything
else (Keras raises ValueError for a shape bug) is a bug: its full traceback, a line saying
so, and exit 1.

Example:
    >>> parser = pipeline_parser("python -m pipelines.pretrain", "Pretrains a BERT.")
    >>> add_common_flags(parser)
    >>> args = parser.parse_args(["--config", "pretrain_tiny.json", "--output_dir", "runs/tiny"])
    >>> main_guard(lambda: print(args.output_dir), verbose=args.verbose)  # sys.exit(main_guard(...))
    runs/tiny
    0
    >>> from kerasbert.errors import DataError
    >>> def run():
    ...     raise DataError("corpus.txt:3: not valid UTF-8")
    >>> main_guard(run)  # prints "error: corpus.txt:3: not valid UTF-8" to stderr
    2
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import signal
import sys
import traceback

from kerasbert.cpu_kernels import prefer_onednn
from kerasbert.data.corpus import default_data_dir
from kerasbert.errors import KerasbertError


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


class MissingDependency(KerasbertError):
    """An optional dependency is not installed (one `error:` line, exit 2, as for bad input)."""


def require(*modules: str, extra: str = "beam") -> None:
    """A clear error when an optional dependency is missing: the extra that installs it."""
    import importlib.util

    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if missing:
        raise MissingDependency(f"{', '.join(missing)} not installed: pip install 'kerasbert[{extra}]' "
                          "(or pip install -r requirements.txt)")


# OS errors that say the user's input or machine is wrong, not the code: a path missing,
# already there or of the wrong kind, no permission, a full disk or a read-only one.
_PATH_ERRORS = (FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError, PermissionError)
_DISK_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS}


def is_bad_input(error: BaseException) -> bool:
    """True for the failures a user fixes (see the module docstring); False for bugs."""
    return (isinstance(error, (KerasbertError, *_PATH_ERRORS))
            or (isinstance(error, OSError) and error.errno in _DISK_ERRNOS))


def main_guard(run, verbose: bool = False) -> int:
    """Runs `run()` after a quiet TensorFlow start-up: bad input is one `error:` line and exit
    code 2; a bug keeps its whole traceback, says it is one, and exits 1."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    signal.signal(signal.SIGTERM, _interrupt)  # a SIGTERM unwinds as Ctrl-C does: backups stay whole
    try:
        prefer_onednn(verbose)  # quiet unless verbose (kerasbert.quiet)
        run()
    except Exception as error:  # noqa: BLE001 (sorted into bad input and bugs)
        if is_bad_input(error):
            print(f"error: {error}", file=sys.stderr)
            return 2
        traceback.print_exc()
        print(f"error: {type(error).__name__} above is a bug (in kerasbert or a library it calls), not a "
              "problem with your input; please report it with the whole traceback", file=sys.stderr)
        return 1
    except KeyboardInterrupt as interrupt:  # training says where it resumes; elsewhere, nothing was kept
        message = str(interrupt) if type(interrupt) is not KeyboardInterrupt else "interrupted"
        print(f"\n{message}", file=sys.stderr)
        return 130
    return 0


def _interrupt(signum, frame):
    raise KeyboardInterrupt
