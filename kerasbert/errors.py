"""The errors kerasbert raises for expected failures: something the user can fix.

`KerasbertError` is their base; the pipelines (`pipelines.common.main_guard`) print its
message as one `error:` line and exit 2. Any other exception is a bug (in kerasbert, or in a
library it calls: Keras raises ValueError for a shape mismatch) and keeps its traceback.
ConfigError, DataError, BackupError and NonFiniteError are also ValueErrors, as they were
before this base existed, so `except ValueError` still catches them.

Example:
    >>> import kerasbert
    >>> try:
    ...     kerasbert.TrainConfig(total_steps=0)
    ... except kerasbert.KerasbertError as error:
    ...     print(f"error: {error}")
    error: train.total_steps must be > 0. Received: 0
"""

from __future__ import annotations


class KerasbertError(Exception):
    """An expected failure with a message that says what to fix (a bad config value, a damaged
    data file, no readable backup, a run gone non-finite).

    Example:
        >>> import kerasbert
        >>> issubclass(kerasbert.DataError, kerasbert.KerasbertError)
        True
        >>> issubclass(ValueError, kerasbert.KerasbertError)  # Keras' shape errors: bugs
        False
    """


class ConfigError(KerasbertError, ValueError):
    """A config value (file, `--set` override or flag) is missing, unknown or out of range.

    Example:
        >>> import kerasbert
        >>> kerasbert.load_config(kerasbert.PretrainConfig, None, ["train.total_step=40"])
        Traceback (most recent call last):
        ...
        kerasbert.errors.ConfigError: Unknown config key 'train.total_step' in --set 'train.total_step=40'. ...
    """


class DataError(KerasbertError, ValueError):
    """A data file is missing, unreadable or holds too little to use; the message names the
    file and, where there is one, the line.

    Example:
        >>> from kerasbert.data.corpus import load_corpora
        >>> load_corpora(["my/corpus.txt"], data_dir="../shared/data")
        Traceback (most recent call last):
        ...
        kerasbert.errors.DataError: my/corpus.txt: file not found (a corpus is the path of a text file, ...
    """


class BackupError(KerasbertError, ValueError):
    """No backup of a run can be read, so the run cannot resume."""


class NonFiniteError(KerasbertError, ValueError):
    """Training or a model reached NaN or infinite values; the message says where."""


class TaskError(ConfigError):
    """A task declaration is wrong: the message names the task and what to change."""
