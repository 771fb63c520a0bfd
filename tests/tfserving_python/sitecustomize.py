"""For TF Serving's test_tf_text under today's absl-py (make tfserving-tests, via ../python).

The test reads its data folder as `flags.os.environ[...]`, `flags` being
tensorflow/python/platform/flags.py, which does `from absl.flags import *`. absl-py 2
defines `absl.flags.__all__`, so that import no longer brings `os` along and the test
stops at its first line on any server (AttributeError). This puts `os` back among absl.flags'
exported names, as absl-py 1 had it; no assertion or server behaviour changes.
"""

import os

import absl.flags

absl.flags.os = os
absl.flags.__all__ = [*absl.flags.__all__, "os"]
