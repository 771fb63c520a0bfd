"""TensorFlow's oneDNN CPU kernels, asked for on every x86 CPU rather than on some.

On Linux, TensorFlow turns its oneDNN kernels on by default only on CPUs with AVX512_VNNI,
AVX512_BF16, AVX_VNNI or AMX (`DefaultOneDnnPolicy` in tensorflow/core/util/port.cc). On
the others, AVX2-only CPUs among them, it runs Eigen's kernels. On such a machine (AMD
EPYC, AVX2) oneDNN made kerasbert's pretraining step 1.3-1.4x faster (`make bench-peers`'
pretrain_speed, against `TF_ENABLE_ONEDNN_OPTS=0`), and, with the finetune_speed and inference
parts bench-peers had until 6e5d183, its fine-tuning step 2.1x while inference gained nothing
(batch 32: 0.94-1.16x; batch 1: slower), so the local server keeps TensorFlow's own choice.
TensorFlow reads the choice once, as it loads, from the environment variable
`TF_ENABLE_ONEDNN_OPTS`.

The pipelines, benchmarks and tests import TensorFlow through `prefer_onednn()`. The
variable is set only while TensorFlow loads, so the processes they start (a local server,
say) make TensorFlow's own choice, as when a user starts them. A user who set
`TF_ENABLE_ONEDNN_OPTS` (to 0 or 1) keeps their choice, in both.
"""

from __future__ import annotations

import os
import sys

from kerasbert.quiet import native_stderr_hidden

VARIABLE = "TF_ENABLE_ONEDNN_OPTS"


def prefer_onednn(verbose: bool | None = None) -> bool:
    """Imports TensorFlow with oneDNN's kernels unless `TF_ENABLE_ONEDNN_OPTS` says
    otherwise, and looks up its devices, its C++ start-up lines hidden unless `verbose`
    (`kerasbert.quiet`). Returns False, changing nothing, once TensorFlow is imported (its
    choice is made by then) or where it is not installed (the peer's environment of
    bench-peers).

    Example, at the top of your own training script (here a fresh process, as `True` needs one
    that has not imported TensorFlow yet):
        >>> import subprocess, sys
        >>> script = '''
        ... import kerasbert
        ... print(kerasbert.prefer_onednn())  # before `import tensorflow` or `import keras`
        ... import keras
        ... print(kerasbert.prefer_onednn())  # too late: TensorFlow has made its choice
        ... '''
        >>> subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
        'True\\nFalse\\n'
    """
    if "tensorflow" in sys.modules:
        return False
    set_here = VARIABLE not in os.environ
    if set_here:
        os.environ[VARIABLE] = "1"
    try:
        with native_stderr_hidden(verbose):
            import tensorflow as tf  # it reads the variable as it loads

            tf.config.list_physical_devices()  # device discovery writes its lines too
    except ImportError:
        return False
    finally:
        if set_here:  # children started later (a local server) make TensorFlow's own choice
            del os.environ[VARIABLE]
    return True


def onednn_enabled() -> bool | None:
    """Whether this process's TensorFlow runs oneDNN's kernels (None: this TensorFlow does
    not say). Imports TensorFlow."""
    try:
        from tensorflow.python.util import _pywrap_util_port
    except ImportError:
        return None
    return bool(_pywrap_util_port.IsMklEnabled())
