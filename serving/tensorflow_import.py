"""TensorFlow imported without its C++ start-up lines ("Could not find cuda drivers",
"failed call to cuInit", "oneDNN custom operations are on", CPU feature notices), which it
writes to file descriptor 2 before TF_CPP_MIN_LOG_LEVEL is read; only a redirect of the
native stderr hides them. They say nothing on a machine without an NVIDIA GPU; with one,
or with `verbose` (or KERASBERT_VERBOSE=1), they are shown. If the import fails, what it wrote is shown.

serving/ stands alone (it knows only SavedModels), so it keeps this helper rather than
borrow kerasbert's.

Example:
    >>> import_tensorflow(verbose=False)  # then `import tensorflow as tf` costs nothing more
"""

from __future__ import annotations

import os
import sys
import tempfile


def import_tensorflow(verbose: bool = False, with_text_ops: bool = True) -> None:
    verbose = verbose or os.environ.get("KERASBERT_VERBOSE", "").lower() in ("1", "true", "yes")
    if verbose or os.path.exists("/dev/nvidiactl") or "tensorflow" in sys.modules:
        _import(with_text_ops)
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    with tempfile.TemporaryFile() as captured:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(captured.fileno(), 2)
        try:
            _import(with_text_ops)
        except BaseException:
            os.dup2(saved, 2)
            captured.seek(0)
            sys.stderr.write(captured.read().decode("utf-8", "replace"))  # why it failed
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def _import(with_text_ops: bool) -> None:
    import tensorflow as tf

    tf.config.list_physical_devices()  # device discovery prints too
    if with_text_ops:
        import tensorflow_text  # noqa: F401  TF Serving links these ops; so do we


def tensorflow_version(verbose: bool = False) -> str:
    """TensorFlow's version, read from the installed `tensorflow` distribution without importing
    it: `--version` answers at once, as TF Serving's does. Another distribution of it
    (tensorflow-cpu, a nightly) is asked by importing it.

    Example:
        >>> tensorflow_version().split(".")[0]
        '2'
    """
    from importlib import metadata

    try:
        return metadata.version("tensorflow")
    except metadata.PackageNotFoundError:
        import_tensorflow(verbose, with_text_ops=False)
        import tensorflow as tf

        return tf.__version__
