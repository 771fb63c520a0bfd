"""`python -m pipelines.<name> --help` explains every flag of every pipeline."""

import argparse
import importlib
import os
import pkgutil
import subprocess
import sys

import pytest

import pipelines
from conftest import ROOT, run_module, without_tensorflow

PIPELINES = sorted(m.name for m in pkgutil.iter_modules(pipelines.__path__) if m.name not in ("common", "demo_stages"))


def test_every_pipeline_is_covered():
    assert {"vocab", "make_pretraining_data", "pretrain", "finetune", "evaluate", "export", "search",
            "demo", "soup", "batch_predict", "build_index"} <= set(PIPELINES)


@pytest.mark.parametrize("name", PIPELINES)
def test_help_explains_each_flag(name, monkeypatch, capsys):
    parsers = []
    parse_known_args = argparse.ArgumentParser.parse_known_args

    def help_instead(self, args=None, namespace=None):  # parse_args calls it too
        parsers.append(self)
        return parse_known_args(self, ["--help"], namespace)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", help_instead)
    with pytest.raises(SystemExit) as exited:
        importlib.import_module(f"pipelines.{name}").main([])
    assert exited.value.code == 0
    text = capsys.readouterr().out
    parser = parsers[0]
    assert parser.prog == f"python -m pipelines.{name}" and len(parser.description or "") > 40
    for action in parser._actions:
        if action.option_strings and action.dest != "help":
            assert action.help and len(action.help) >= 15, f"{name}: {action.option_strings} has no help"
            assert action.option_strings[0] in text


def test_each_pipeline_starts_as_a_module_and_answers_help_before_tensorflow_loads(tmp_path):
    """Other tests call the pipelines' `main()` in their own process; here each starts as a user
    starts it."""
    for name in PIPELINES:
        result = run_module([f"pipelines.{name}", "--help"], env=without_tensorflow(tmp_path), timeout=60)
        assert f"usage: python -m pipelines.{name}" in result.stdout



# The Beam pipeline as a user without `.[beam]` runs it: apache_beam is not found.
WITHOUT_BEAM = """
import importlib.util, sys
found = importlib.util.find_spec
importlib.util.find_spec = lambda name, *args: None if name == "apache_beam" else found(name, *args)
from pipelines import batch_predict
sys.exit(batch_predict.main(["--model_dir", "m", "--input", "x", "--output", "o"]))
"""


def test_a_missing_optional_dependency_is_one_line_naming_the_extra():
    result = subprocess.run([sys.executable, "-c", WITHOUT_BEAM], cwd=ROOT, capture_output=True, text=True,
                            timeout=120, env={**os.environ, "PYTHONPATH": ROOT})
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.strip() == ("error: apache_beam not installed: pip install 'kerasbert[beam]' "
                                     "(or pip install -r requirements.txt)")


@pytest.mark.parametrize("name", PIPELINES)
def test_help_as_a_console_command_names_that_command_and_keeps_its_examples_lines(name, monkeypatch, capsys):
    import re

    command = "kerasbert-" + name.replace("_", "-")
    monkeypatch.setattr(sys, "argv", [f"/venv/bin/{command}"])
    with pytest.raises(SystemExit):
        importlib.import_module(f"pipelines.{name}").main(["--help"])
    text = capsys.readouterr().out
    assert text.startswith(f"usage: {command} ") and f"python -m pipelines.{name} " not in text
    assert not re.search(r"\S {4,}--", text.split("options:")[0]), text  # a `\` line break swallowed


@pytest.mark.parametrize("args, first_line", [
    (["pipelines.export", "--model_dir", "runs/x", "--export_base", "{tmp}/out"],
     "== exporting runs/x under {tmp}/out (loading TensorFlow, then the run)"),
    (["pipelines.import_transformers", "--checkpoint", "hf/x", "--output_dir", "{tmp}/run"],
     "== importing hf/x into {tmp}/run (loading TensorFlow, then the checkpoint)")])
def test_export_and_import_say_what_they_do_before_tensorflow_loads(tmp_path, args, first_line):
    """Their first progress line comes at once: TensorFlow's import, most of a minute on a busy
    machine, follows it (here it ends the process)."""
    result = run_module([arg.format(tmp=tmp_path) for arg in args], env=without_tensorflow(tmp_path / "no-tf"),
                        timeout=60, check=False)
    assert "TensorFlow was imported" in result.stderr
    assert result.stdout.splitlines() == [first_line.format(tmp=tmp_path)]
