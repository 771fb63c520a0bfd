"""Which folder names are versions: kerasbert's export and the server each keep a parser (the
layers do not import each other); these tests hold the two to one table."""

import pytest

from kerasbert.export import next_version, version_number
from serving.source import parse_version

NAMES = ["1", "01", "007", "0", "+7", "-1", " 3 ", "1\n", "1 2", "1a", "1.5", "", "+", "-", "\u00b2",
         "\u0661", "\uff11", "9223372036854775807", "9223372036854775808", "-9223372036854775808",
         "-9223372036854775809", "0" * 40 + "5", ".123-building-456-1"]
HUGE = ["9" * 4301, "0" * 4300 + "1"]  # more digits than Python's int() reads by default


@pytest.mark.parametrize("name", NAMES)
def test_export_and_server_read_a_folder_name_alike(name):
    assert version_number(name) == parse_version(name)


@pytest.mark.parametrize("name", HUGE, ids=["4301 nines", "4300 zeros and 1"])
def test_thousands_of_digits_are_read_without_int(name):
    assert version_number(name) == (1 if name.endswith("01") else None)


@pytest.mark.parametrize("name", HUGE, ids=["4301 nines", "4300 zeros and 1"])
def test_the_server_reads_thousands_of_digits_alike(name):
    assert parse_version(name) == version_number(name)


def test_the_next_version_follows_every_folder_the_server_would_serve(tmp_path):
    for name in ("\u00b2", "-1", " 12", "3", "1a", ".5-building-9-x"):
        (tmp_path / name).mkdir()
    assert next_version(str(tmp_path)) == 13  # " 12" is version 12 to the server
    assert next_version(str(tmp_path / "missing")) == 1
