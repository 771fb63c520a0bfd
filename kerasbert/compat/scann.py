"""ScaNN's searcher without its TensorFlow ops.

`import scann` runs the package's `__init__`, which loads ScaNN's TensorFlow custom ops
(`_scann_ops.so`) whenever TensorFlow is importable; scann 1.4.2 builds them for
TensorFlow 2.20, and under 2.21 the library fails to load (an undefined absl symbol).
kerasbert needs only the pybind searcher (`scann_ops_pybind`), which does not touch
TensorFlow, so the package's folder is registered as the `scann` package without running
its `__init__`, and the pybind module is imported from it.

Example:
    >>> import numpy as np
    >>> vectors = np.random.default_rng(0).normal(size=(2000, 16)).astype(np.float32)
    >>> vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)  # inner products are cosines
    >>> pybind = scann_pybind()
    >>> searcher = pybind.builder(vectors, 10, "dot_product").score_brute_force().build()
    >>> rows, scores = searcher.search(vectors[7])
    >>> int(rows[0])
    7
    >>> importlib.util.find_spec("scann").name  # the package stays findable, as imported packages are
    'scann'
"""

from __future__ import annotations

import importlib
import importlib.util
import sys


def scann_pybind():
    if "scann" not in sys.modules:
        spec = importlib.util.find_spec("scann")
        if spec is None:
            raise ImportError("ScaNN is not installed: pip install scann (or use --backend faiss)")
        # The package as `import scann` would make it (its spec, path and file), minus running
        # its `__init__`: a module without a spec broke find_spec("scann") later in the process.
        sys.modules["scann"] = importlib.util.module_from_spec(spec)
    return importlib.import_module("scann.scann_ops.py.scann_ops_pybind")
