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
from kerasbert.data.corpus import check_data_dir, default_data_dir
from kerasbert.errors import KerasbertError


CONFIG_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs")


def config_path(path: str) -> str:
    """`path` if it is a file; a bare NAME or NAME.json, or the documented
    `pipelines/configs/NAME[.json]`, is a config shipped with the package (so found outside the
    clone too); anything else that does not exist is an error naming it.

    >>> os.path.basename(config_path("pretrain_tiny"))
    'pretrain_tiny.json'
    """
    if os.path.isfile(path):
        return path
    folder, name = os.path.split(path)
    if folder in ("", os.path.join("pipelines", "configs")):
        for candidate in (name, name + ".json"):
            if os.path.isfile(os.path.join(CONFIG_DIR, candidate)):
                return os.path.join(CONFIG_DIR, candidate)
    shipped = sorted(f[:-len(".json")] for f in os.listdir(CONFIG_DIR) if f.endswith(".json"))
    what = "is a folder, not a config file" if os.path.isdir(path) else "does not exist"
    raise argparse.ArgumentTypeError(f"{path} {what} (shipped configs, found by name: {', '.join(shipped)})")


def data_dir(path: str) -> str:
    """The --data_dir flag's type: a folder that exists, else one line naming the ways to give one."""
    try:
        return check_data_dir(path)
    except FileNotFoundError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def output_folder(path: str) -> str:
    """The type of a flag naming a folder to write into: refused in one line when it, or a folder
    above it, is an existing file (os.makedirs would say only `[Errno 17] File exists`).

    >>> output_folder("README.md")
    Traceback (most recent call last):
    argparse.ArgumentTypeError: README.md is a file, not a folder
    """
    above = path
    while above and not os.path.exists(above):
        above = os.path.dirname(above.rstrip(os.sep))
    if above and not os.path.isdir(above):
        raise argparse.ArgumentTypeError(f"{path} is a file, not a folder" if above == path else
                                         f"{path} cannot be a folder: {above} is a file")
    return path


def program_name(module_form: str) -> str:
    """The command as the user typed it: `kerasbert-finetune` when run as that console command,
    else `module_form` (`python -m pipelines.finetune`)."""
    command = os.path.basename(sys.argv[0])
    return command if command.startswith("kerasbert-") else module_form


class OneLineErrors(argparse.ArgumentParser):
    """argparse, with a flag's error as one `error:` line (as every other bad input is), not the
    usage block before it."""

    def error(self, message):
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


def pipeline_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """An argument parser with the pipeline's docstring as its help and a `--verbose` flag.
    `prog` is the `python -m pipelines.NAME` form; run as a console command, usage and help
    say that command instead."""
    command = program_name(prog)
    parser = OneLineErrors(prog=command, description=description.replace(prog, command),
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
    parser.add_argument("--data_dir", default=default_data_dir(), type=data_dir,
                        help="Folder holding cs224n/ and wikitext-2/ (default: $KERASBERT_DATA_DIR, "
                             "else ../shared/data).")
    parser.add_argument("--output_dir", required=True, type=output_folder,
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


def missing_dependency(error: BaseException) -> bool:
    """True for an import of a library kerasbert needs that this Python lacks (another
    interpreter than the project's .venv); a module of kerasbert's own missing is a bug.

    >>> missing_dependency(ModuleNotFoundError("No module named 'tensorflow'", name="tensorflow"))
    True
    >>> missing_dependency(ModuleNotFoundError("No module named 'kerasbert.x'", name="kerasbert.x"))
    False
    """
    return isinstance(error, ModuleNotFoundError) and bool(error.name) and \
        error.name.split(".")[0] not in ("kerasbert", "pipelines", "serving", "benchmarks")


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
        if missing_dependency(error):
            print(f"error: {error}: this Python ({sys.executable}) lacks kerasbert's dependencies; run "
                  "the project's .venv/bin/python (`make install` makes it) or `source .venv/bin/activate` "
                  "first", file=sys.stderr)
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
