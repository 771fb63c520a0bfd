"""TensorFlow's C++ start-up lines, hidden where they say nothing.

Without an NVIDIA GPU, TensorFlow writes "Could not find cuda drivers", "failed call to
cuInit", "oneDNN custom operations are on" and CPU feature notices to file descriptor 2
as it loads and looks up its devices, before TF_CPP_MIN_LOG_LEVEL is read; only a
redirect of the native stderr hides them. They are shown with an NVIDIA GPU (then they
say which devices TensorFlow found), with `verbose`, or with KERASBERT_VERBOSE=1; when
what runs inside fails, what it wrote is shown.

Example:
    >>> with native_stderr_hidden(verbose=False):  # around `import tensorflow`
    ...     _ = os.write(2, b"Could not find cuda drivers on your machine.")  # not shown
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile

VERBOSE_VARIABLE = "KERASBERT_VERBOSE"


def has_nvidia_gpu() -> bool:
    return os.path.exists("/dev/nvidiactl")


def verbose_from_environment() -> bool:
    return os.environ.get(VERBOSE_VARIABLE, "").lower() in ("1", "true", "yes")


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


@contextlib.contextmanager
def native_stderr_hidden(verbose: bool | None = None):
    """Hides what the block writes to file descriptor 2 unless `verbose` (None: from
    KERASBERT_VERBOSE) or an NVIDIA GPU is present; shows it if the block raises. Also
    sets TF_CPP_MIN_LOG_LEVEL=3 unless the user set it: TensorFlow's C++ errors here are
    notices ("oneDNN supports DT_INT64 only on platforms with AVX-512"); a real failure
    still reaches Python as an exception."""
    if verbose is None:
        verbose = verbose_from_environment()
    if verbose or has_nvidia_gpu():
        yield
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    with tempfile.TemporaryFile() as captured:
        try:
            with native_stderr_to(captured):
                yield
        except BaseException:
            captured.seek(0)
            sys.stderr.write(captured.read().decode("utf-8", "replace"))  # why it failed
            raise


class _BelowErrorFrom(logging.Filter):
    """Drops log records below ERROR written by the code of one package."""

    def __init__(self, package: str):
        super().__init__()
        self.folder = f"{os.sep}{package}{os.sep}"

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR or self.folder not in record.pathname


def hide_library_logs(package: str, verbose: bool | None = None) -> None:
    """Hides the INFO and WARNING lines that `package`'s own code logs through the root
    logger's handlers (Apache Beam's bookkeeping: "apitools not found", harness start-up),
    unless `verbose` (None: from KERASBERT_VERBOSE). Errors still show."""
    if verbose is None:
        verbose = verbose_from_environment()
    if verbose:
        return
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    for handler in logging.getLogger().handlers:
        hidden = _BelowErrorFrom(package)
        if not any(isinstance(f, _BelowErrorFrom) and f.folder == hidden.folder for f in handler.filters):
            handler.addFilter(hidden)
