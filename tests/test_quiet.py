"""TensorFlow's C++ start-up lines ("Could not find cuda drivers", "failed call to cuInit",
"oneDNN custom operations are on") say nothing on a machine without an NVIDIA GPU: a user's
program that uses kerasbert, and the client, do not print them; KERASBERT_VERBOSE=1 shows them."""

import os
import subprocess
import sys

import pytest

from conftest import ROOT

pytestmark = pytest.mark.skipif(os.path.exists("/dev/nvidiactl"), reason="with a GPU the lines are shown")

USER_PROGRAM = "import kerasbert; kerasbert.build_encoder('tiny', vocabulary_size=100); print('built')"


def stderr_of(code: str, **env) -> str:
    environment = {key: value for key, value in os.environ.items()
                   if key not in ("TF_CPP_MIN_LOG_LEVEL", "KERASBERT_VERBOSE")}
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                            env={**environment, "PYTHONPATH": ROOT, **env}, check=True)
    assert result.stdout.strip().endswith("built")
    return result.stderr


def test_a_program_using_kerasbert_prints_no_start_up_lines_unless_asked():
    assert stderr_of(USER_PROGRAM) == ""
    assert "Could not find cuda drivers" in stderr_of(USER_PROGRAM, KERASBERT_VERBOSE="1")


def test_a_failed_import_still_shows_what_tensorflow_wrote(tmp_path):
    """A broken TensorFlow is not hidden: what it wrote reaches the user with the exception."""
    fake = tmp_path / "tensorflow"
    fake.mkdir()
    (fake / "__init__.py").write_text("import os\nos.write(2, b'native: broken install\\n')\nraise ImportError('no')\n")
    code = ("import sys; sys.path.insert(0, %r)\nfrom kerasbert.cpu_kernels import prefer_onednn\n"
            "print(prefer_onednn()); print('built')" % str(tmp_path))
    assert "native: broken install" in stderr_of(code)
