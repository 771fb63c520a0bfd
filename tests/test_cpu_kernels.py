"""The pipelines and the benchmarks run TensorFlow's oneDNN kernels on every x86 CPU, where
TensorFlow alone would leave them off on AVX2-only CPUs; the processes they start (a local
server) make TensorFlow's own choice; a user's own TF_ENABLE_ONEDNN_OPTS wins."""

import os
import platform
import subprocess
import sys

import pytest

from conftest import ROOT

pytestmark = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"),
                                reason="TensorFlow's oneDNN kernels are built for x86 here")

# This process's choice, and whether it left the variable for the processes it starts.
REPORT = ("import os; from kerasbert.cpu_kernels import onednn_enabled; "
          "print(onednn_enabled(), 'TF_ENABLE_ONEDNN_OPTS' in os.environ)")
# The choice of a TensorFlow process started from this one.
CHILD = ("import subprocess, sys; print(subprocess.run([sys.executable, '-c', 'import tensorflow; "
         "from kerasbert.cpu_kernels import onednn_enabled; print(onednn_enabled())'], "
         "capture_output=True, text=True, check=True).stdout.split()[-1])")
# The kernel a product runs on: oneDNN's op is _MklNativeFusedMatMul, Eigen's _FusedMatMul.
KERNEL = """
import glob, tempfile
import tensorflow as tf
from tensorflow.tsl.profiler.protobuf import xplane_pb2
product = tf.function(lambda a: tf.nn.relu(tf.nn.bias_add(tf.matmul(a, a), a[0])))
a = tf.ones([16, 16]); product(a)
with tempfile.TemporaryDirectory() as logdir:
    tf.profiler.experimental.start(logdir); product(a); tf.profiler.experimental.stop()
    space = xplane_pb2.XSpace()
    space.ParseFromString(open(glob.glob(logdir + "/**/*.xplane.pb", recursive=True)[0], "rb").read())
print(sorted({m.name.split(":")[-1] for p in space.planes for m in p.event_metadata.values()
              if m.name.endswith("MatMul")}))
"""


def fresh_process(code: str, variable: str | None = None) -> list[str]:
    """The lines `code` prints, run with TF_ENABLE_ONEDNN_OPTS unset (or `variable`)."""
    env = {key: value for key, value in os.environ.items() if key != "TF_ENABLE_ONEDNN_OPTS"}
    if variable is not None:
        env["TF_ENABLE_ONEDNN_OPTS"] = variable
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                            env={**env, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "3"}, timeout=180, check=True)
    return result.stdout.strip().splitlines()


def tensorflow_by_cpu() -> bool:
    """TensorFlow's own choice: oneDNN when the CPU has AVX512_VNNI, AVX512_BF16, AVX_VNNI or AMX."""
    with open("/proc/cpuinfo") as f:
        flags = set(f.read().split("\n\n")[0].split())
    return bool(flags & {"avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile", "amx_int8", "amx_bf16"})


PIPELINE = "from pipelines.common import main_guard; main_guard(lambda: None)"
# A benchmark's command as `python -m` runs it (here its --help, which ends in SystemExit).
BENCHMARK = """import runpy, sys
sys.argv[1:] = ["--help"]
try:
    runpy.run_module("benchmarks.multitask", run_name="__main__", alter_sys=True)
except SystemExit:
    pass"""


def test_a_pipeline_turns_onednn_on_and_a_process_it_starts_chooses_for_itself():
    # A server that a pipeline starts runs what TensorFlow alone picks for the CPU, as when a user starts it.
    assert fresh_process(f"{PIPELINE}\n{REPORT}\n{CHILD}") == ["True False", str(tensorflow_by_cpu())]


def test_a_benchmark_turns_onednn_on_and_leaves_no_variable_behind():
    assert fresh_process(f"{BENCHMARK}\n{REPORT}")[-1] == "True False"


def test_the_library_call_turns_onednn_on_and_the_products_run_on_its_kernels():
    assert fresh_process(f"import kerasbert; kerasbert.prefer_onednn(); import keras\n{REPORT}\n{KERNEL}")[-2:] == \
        ["True False", "['_MklNativeFusedMatMul']"]


def test_a_users_own_variable_wins():
    assert fresh_process(f"{PIPELINE}\n{REPORT}", variable="0") == ["False True"]


def test_too_late_once_tensorflow_is_imported(monkeypatch):
    import tensorflow  # noqa: F401

    from kerasbert.cpu_kernels import prefer_onednn

    monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)
    assert prefer_onednn() is False
    assert "TF_ENABLE_ONEDNN_OPTS" not in os.environ
