"""`python -m pipelines.<name> --help` explains every flag of every pipeline."""

import argparse
import importlib
import pkgutil

import pytest

import pipelines
from conftest import run_module

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


def test_each_pipeline_starts_as_a_module_and_answers_help_before_tensorflow_loads():
    """Other tests call the pipelines' `main()` in their own process; here each starts as a user
    starts it."""
    for name in PIPELINES:
        result = run_module([f"pipelines.{name}", "--help"], timeout=60, python_options=("-X", "importtime"))
        assert f"usage: python -m pipelines.{name}" in result.stdout
        assert "| tensorflow\n" not in result.stderr, name
