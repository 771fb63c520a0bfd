"""What a new user types first: shipped configs by name, the data folder, output folders. A
mistake is one line naming what was wrong, before any work is done."""

import os
import subprocess
import sys

import pytest

from conftest import ROOT, run_main


@pytest.fixture
def no_training(monkeypatch):
    """A run that gets past its flags fails the test at once instead of training."""
    import kerasbert.finetuning.run

    def refuse(*args, **kwargs):
        raise AssertionError("the run started: its flags should have been refused")

    monkeypatch.setattr(kerasbert.finetuning.run, "run_finetuning", refuse)


def finetune(*flags):
    return ["pipelines.finetune", "--init_checkpoint", "unused", *flags]


def test_a_shipped_config_is_found_by_bare_name():
    from pipelines.common import CONFIG_DIR, config_path

    for given in ("pretrain_tiny", "pretrain_tiny.json", "pipelines/configs/pretrain_tiny"):
        assert config_path(given) == os.path.join(CONFIG_DIR, "pretrain_tiny.json")


def test_a_config_path_that_does_not_exist_is_an_error_naming_it(tmp_path, capsys, no_training):
    result = run_main(finetune("--config", "configs/finetune_tiny.json", "--output_dir", str(tmp_path / "r")), capsys)
    assert result.returncode == 2
    assert "argument --config: configs/finetune_tiny.json does not exist (shipped configs, found by name:" in result.stderr


def test_a_missing_data_folder_names_the_three_ways_to_give_one(tmp_path, capsys, monkeypatch, no_training):
    monkeypatch.setenv("KERASBERT_DATA_DIR", str(tmp_path / "nowhere"))
    result = run_main(finetune("--config", "finetune_tiny", "--output_dir", str(tmp_path / "r")), capsys)
    assert result.returncode == 2
    assert (f"data folder {tmp_path / 'nowhere'} does not exist: pass --data_dir DIR, set KERASBERT_DATA_DIR=DIR, "
            "or run from a folder whose ../shared/data exists") in result.stderr


def test_the_default_data_folder_is_found_from_the_working_folder(tmp_path, monkeypatch):
    from kerasbert.data.corpus import default_data_dir

    (tmp_path / "shared" / "data").mkdir(parents=True)
    (tmp_path / "clone").mkdir()
    monkeypatch.chdir(tmp_path / "clone")
    monkeypatch.delenv("KERASBERT_DATA_DIR", raising=False)
    assert os.path.samefile(default_data_dir(), tmp_path / "shared" / "data")


@pytest.mark.parametrize("module, flag", [("pipelines.finetune", "--output_dir"), ("pipelines.export", "--export_base")])
def test_a_file_where_an_output_folder_is_expected_is_one_line(tmp_path, capsys, no_training, module, flag):
    a_file = tmp_path / "notes.txt"
    a_file.write_text("")
    for given, message in ((a_file, f"{a_file} is a file, not a folder"),
                           (a_file / "run", f"{a_file / 'run'} cannot be a folder: {a_file} is a file")):
        args = finetune("--config", "finetune_tiny") if module == "pipelines.finetune" else [module, "--model_dir", "m"]
        result = run_main([*args, flag, str(given)], capsys)
        assert result.returncode == 2 and f"argument {flag}: {message}" in result.stderr


def test_pretrain_fit_example_refuses_a_file_as_output_folder_before_training(tmp_path):
    a_file = tmp_path / "notes.txt"
    a_file.write_text("")
    result = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "pretrain_fit.py"), "--text", str(a_file),
                             "--output_dir", str(a_file)], env={**os.environ, "PYTHONPATH": ROOT},
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 2 and f"--output_dir {a_file} is a file, not a folder" in result.stderr
    assert "Traceback" not in result.stderr
