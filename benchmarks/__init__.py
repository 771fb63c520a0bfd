"""Benchmarks measure kerasbert as its pipelines run it: TensorFlow loaded with its oneDNN
kernels (`kerasbert.cpu_kernels`), unless TF_ENABLE_ONEDNN_OPTS is set. The servers they
start keep TensorFlow's own choice, as a user's do. `python -m benchmarks.<name>` imports
this package first."""

from kerasbert.cpu_kernels import prefer_onednn

prefer_onednn()
