"""`main_guard` tells bad input (one `error:` line, exit 2) from bugs (the whole traceback,
a line saying it is a bug, exit 1): Keras raises ValueError for a shape bug, which must
not look like bad input."""

import errno

import keras
import numpy as np
import pytest

import kerasbert
from kerasbert.errors import BackupError, NonFiniteError
from pipelines.common import MissingDependency, main_guard


def raising(error):
    def run():
        raise error
    return run


def shape_bug():
    """A model called on inputs of the wrong width: a bug in the code that calls it."""
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model(np.zeros((1, 5), "float32"))


def test_a_shape_error_inside_a_model_prints_its_traceback_and_says_it_is_a_bug(capsys):
    assert main_guard(shape_bug) == 1
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):") and "in shape_bug" in err
    assert "ValueError" in err and "above is a bug" in err.splitlines()[-1]


def test_an_unexpected_value_error_is_a_bug_not_bad_input(capsys):
    assert main_guard(raising(ValueError("could not broadcast"))) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "ValueError: could not broadcast" in err


@pytest.mark.parametrize("error", [
    kerasbert.ConfigError("train.total_steps must be positive. Received: 0"),
    kerasbert.DataError("sst-train.tsv:3: not valid UTF-8"),
    BackupError("block-0002.weights.h5: no backup can be read"),
    NonFiniteError("loss became NaN at step 7"),
    MissingDependency("apache_beam not installed"),
    FileNotFoundError(errno.ENOENT, "No such file or directory", "my/corpus.txt"),
    FileExistsError("saved_models/kerasbert/3 exists"),
    OSError(errno.ENOSPC, "No space left on device"),
])
def test_bad_input_is_one_error_line(capsys, error):
    assert main_guard(raising(error)) == 2
    assert capsys.readouterr().err == f"error: {error}\n"


def test_an_os_error_that_is_not_about_a_users_path_is_a_bug(capsys):
    assert main_guard(raising(OSError(errno.EBADF, "Bad file descriptor"))) == 1
    assert "Traceback" in capsys.readouterr().err


def test_expected_failures_are_still_value_errors_where_callers_catch_those():
    for error in (kerasbert.ConfigError, kerasbert.DataError, BackupError, NonFiniteError):
        assert issubclass(error, kerasbert.KerasbertError) and issubclass(error, ValueError)


def test_a_library_missing_from_this_python_points_at_the_projects_venv(capsys):
    """Run with another interpreter than .venv's, kerasbert's own imports fail: not a bug."""
    missing = ModuleNotFoundError("No module named 'tensorflow'", name="tensorflow")
    assert main_guard(raising(missing)) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and ".venv/bin/python" in err and "No module named 'tensorflow'" in err
    assert main_guard(raising(ModuleNotFoundError("No module named 'kerasbert.gone'", name="kerasbert.gone"))) == 1
