"""The pipelines and the benchmarks run TensorFlow's oneDNN kernels on every x86 CPU, where
TensorFlow alone would leave them off on AVX2-only CPUs; a user's own TF_ENABLE_ONEDNN_OPTS
wins."""

import os
import platform
import subprocess
import sys

import pytest

from conftest import ROOT

pytestmark = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"),
                                reason="TensorFlow's oneDNN kernels are built for x86 here")

REPORT = "from kerasbert.cpu_kernels import onednn_enabled; print(onednn_enabled())"


def onednn_in_fresh_process(code: str, variable: str | None = None) -> str:
    env = {key: value for key, value in os.environ.items() if key != "TF_ENABLE_ONEDNN_OPTS"}
    if variable is not None:
        env["TF_ENABLE_ONEDNN_OPTS"] = variable
    result = subprocess.run([sys.executable, "-c", f"{code}\n{REPORT}"], cwd=ROOT, capture_output=True, text=True,
                            env={**env, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "3"}, timeout=120, check=True)
    return result.stdout.split()[-1]


@pytest.mark.parametrize("start", ["from pipelines.common import import_tensorflow; import_tensorflow()",
                                   "import benchmarks.results",
                                   "import kerasbert; kerasbert.prefer_onednn(); import keras"])
def test_each_entry_point_turns_onednn_on(start):
    assert onednn_in_fresh_process(start) == "True"


def test_tensorflow_alone_keeps_its_own_choice_and_so_does_a_user():
    # Without the call TensorFlow decides by the CPU (on when it has AVX512_VNNI, AVX512_BF16,
    # AVX_VNNI or AMX); a user's 0 stays 0 with it.
    with open("/proc/cpuinfo") as f:
        flags = set(f.read().split("\n\n")[0].split())
    by_cpu = bool(flags & {"avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile", "amx_int8", "amx_bf16"})
    assert onednn_in_fresh_process("import tensorflow") == str(by_cpu)
    assert onednn_in_fresh_process("from pipelines.common import import_tensorflow; import_tensorflow()",
                                   variable="0") == "False"


def test_too_late_once_tensorflow_is_imported(monkeypatch):
    import tensorflow  # noqa: F401

    from kerasbert.cpu_kernels import prefer_onednn

    monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)
    assert prefer_onednn() is False
    assert "TF_ENABLE_ONEDNN_OPTS" not in os.environ
