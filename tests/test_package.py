"""The package as `pip install .` gives it: declared dependencies, console commands, the
pipelines and their configs inside the wheel, `import kerasbert` and README's quick start working
outside the clone."""

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile

import pytest
from packaging.requirements import Requirement

from conftest import DATA_DIR, ROOT

COMMANDS = ("kerasbert-demo", "kerasbert-pretrain", "kerasbert-finetune", "kerasbert-evaluate",
            "kerasbert-export", "kerasbert-search", "kerasbert-serve")


def pinned_versions() -> dict[str, str]:
    pins = {}
    for line in open(os.path.join(ROOT, "requirements.txt")):
        line = line.split("#")[0].strip()
        if "==" in line:
            name, version = line.split("==")
            pins[name.lower()] = version
    return pins


@pytest.mark.end_to_end
def test_wheel_installs_into_a_fresh_venv_and_its_commands_and_the_quick_start_run(tmp_path):
    wheels = tmp_path / "wheels"
    build = os.path.join(ROOT, "build")
    had_build = os.path.exists(build)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(wheels), ROOT], check=True, cwd=tmp_path)
    if not had_build:  # setuptools builds inside the source tree
        shutil.rmtree(build, ignore_errors=True)
    (wheel,) = wheels.glob("kerasbert-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        entry_points = archive.read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "pipelines/pretrain.py" in names and "pipelines/configs/pretrain_tiny.json" in names
    assert "serving/batching.config" in names
    assert all(f"{command} =" in entry_points for command in COMMANDS)

    # Every declared dependency is one the tested lock satisfies.
    required = [Requirement(line.split(":", 1)[1].strip()) for line in metadata.splitlines()
                if line.startswith("Requires-Dist:")]
    pins = pinned_versions()
    for extra in ("", "beam", "test"):  # the base install, and each extra on top of it
        declared = [r for r in required if not r.marker or r.marker.evaluate({"extra": extra})]
        for requirement in declared:
            name = requirement.name.lower()
            assert name in pins, f"{name} declared but not in requirements.txt"
            assert requirement.specifier.contains(pins[name]), (name, str(requirement.specifier), pins[name])
    base = {r.name.lower(): r.specifier for r in required if not r.marker or r.marker.evaluate({"extra": ""})}
    assert {"tensorflow", "keras", "keras-hub", "aiohttp"} <= set(base)
    # What an unpinned `pip install .` resolved before: protobuf 7 (Beam needs < 7), and the
    # grpcio-health-checking that needs it.
    assert not base["protobuf"].contains("7.0.0") and not base["grpcio-health-checking"].contains("1.85.0")

    # A fresh venv; the dependencies come from this one's site-packages (a .pth), not the network.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          check=True, capture_output=True, text=True).stdout.strip()
    with open(os.path.join(site, "deps.pth"), "w") as f:
        f.write(sysconfig.get_path("purelib") + "\n")
    # Without the clone on PYTHONPATH (make test sets it), where pip would find kerasbert "installed".
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
                    "--no-deps", "--no-index", str(wheel)], check=True, env=env)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    for command in ("kerasbert-demo", "kerasbert-serve"):
        shown = subprocess.run([str(venv / "bin" / command), "--help"], cwd=outside, env=env,
                               capture_output=True, text=True, timeout=300)
        assert shown.returncode == 0 and "usage:" in shown.stdout, shown.stderr[-2000:]
    # The installed copy, not the clone's (`import kerasbert` loads no TensorFlow: the run below
    # is what shows its TensorFlow side works).
    imported = subprocess.run([str(venv / "bin" / "python"), "-c", "import kerasbert; print(kerasbert.__file__)"],
                              cwd=outside, env=env, capture_output=True, text=True, timeout=300)
    assert imported.returncode == 0 and imported.stdout.strip().startswith(site), imported.stderr[-2000:]

    # A shipped config found by name: its flags check out up to the data folder, which is refused
    # in one line (run from elsewhere, no ../shared/data).
    env.pop("KERASBERT_DATA_DIR", None)
    refused = subprocess.run([str(venv / "bin" / "kerasbert-finetune"), "--config", "finetune_tiny",
                              "--output_dir", "run"], cwd=outside, env=env, capture_output=True, text=True,
                             timeout=300)
    assert refused.returncode == 2 and "--data_dir DIR, set KERASBERT_DATA_DIR=DIR" in refused.stderr, refused.stderr

    # A new user's first program: README's Python quick start, on the installed copy.
    result = subprocess.run([str(venv / "bin" / "python"), "-c", readme_quick_start(outside)], cwd=outside,
                            env=env, capture_output=True, text=True, timeout=900)  # a hang guard
    assert result.returncode == 0, result.stderr[-3000:]
    assert (outside / "sts" / "1" / "saved_model.pb").exists()
    assert "shuffle=True was passed" not in result.stderr


def readme_quick_start(folder) -> str:
    """README's Python quick start, with its paths pointed into `folder`, the tiny encoder for the
    mini one, 2 steps a fit and the first 60 kB of its corpus (tokenizing all of WikiText-2's
    valid.txt takes a while)."""
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    code = readme.split("```python\n", 1)[1].split("```", 1)[0]
    corpus = folder / "corpus.txt"
    with open(os.path.join(DATA_DIR, "wikitext-2", "valid.txt"), encoding="utf-8") as f:
        corpus.write_text(f.read(60_000), encoding="utf-8")
    for old, new in (("steps_per_epoch=50, epochs=2", "steps_per_epoch=2"), ('build_encoder("mini"', 'build_encoder("tiny"'),
                     ("steps_per_epoch=50", "steps_per_epoch=2"),
                     ('"../shared/data/wikitext-2/valid.txt"', repr(str(corpus))), ("../shared/data", DATA_DIR),
                     ('"saved_models/sts"', repr(str(folder / "sts")))):
        assert old in code, f"README's quick start no longer has {old!r}: update this test"
        code = code.replace(old, new)
    return code


def test_the_numpy_dtypes_tensorflow_loads_are_the_pinned_release():
    """ml_dtypes is imported by every TensorFlow process (each server, pipeline and test child):
    0.7.0 took 0.55 CPU-s to import here, the pinned 0.6.0 0.01 (requirements.txt). What is
    installed is that pin (the import's cost is a figure, not a test: a timing on a shared machine)."""
    from importlib.metadata import version

    assert version("ml-dtypes") == pinned_versions()["ml-dtypes"], "see requirements.txt's ml-dtypes pin"
