"""Benchmarks run TensorFlow as kerasbert's pipelines do, with oneDNN's kernels unless
TF_ENABLE_ONEDNN_OPTS says otherwise; the servers they start keep TensorFlow's own choice."""

import importlib.util

if importlib.util.find_spec("tensorflow"):  # none in the peers' environment: kerasbert stays out of it
    from kerasbert.cpu_kernels import prefer_onednn

    prefer_onednn()
