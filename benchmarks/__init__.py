"""Benchmarks measure kerasbert as its pipelines run it: with TensorFlow's oneDNN kernels
asked for before TensorFlow is imported (`kerasbert.cpu_kernels`), unless
TF_ENABLE_ONEDNN_OPTS is set. `python -m benchmarks.<name>` imports this package first."""

from kerasbert.cpu_kernels import prefer_onednn

prefer_onednn()
