"""Resumable training state: one backup per block, written whole or not at all.

After each block the chief writes the weights and the optimizer state to
`backup/block-NNNN.weights.h5` through a temporary file, synced, and a rename, so a kill or
a power loss during the write leaves the previous backup as it was; the newest two are
kept. Weights that hold NaN or infinities are never written (an error instead), and a file
that holds them is damaged. A run that starts
again picks the newest backup that reads back whole, falling back to the one before with
a message naming the damaged file, and takes both its weights and its step from that one
file: the batches the data skips are always those the restored weights trained on. When
the last block is done the backups are removed: each worker removes its own files only (a
chief's `backup/` holds its workers' folders), and the last to end removes `backup/`.

Example (kerasbert.training.run.TrainingRun does this for every run):
    >>> import keras, tensorflow as tf
    >>> keras.utils.set_random_seed(0)
    >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1, name="dense")], name="model")
    >>> data = tf.data.Dataset.from_tensor_slices((tf.ones([8, 3]), tf.ones([8, 1]))).batch(4).repeat()
    >>> model.compile(optimizer="adam", loss="mse")
    >>> backup_dir = f"{tmp_path}/backup"
    >>> start = find_backup(backup_dir)  # None: nothing to resume
    >>> restore(model, start)  # after building the data from step start.blocks_done * steps_per_block
    >>> history = model.fit(data, initial_epoch=start.blocks_done if start else 0, epochs=3, steps_per_epoch=2,
    ...                     verbose=0, callbacks=[BlockWeights(backup_dir, remove_at_end=False)])
    >>> find_backup(backup_dir).blocks_done  # a restart would resume here
    3
"""

from __future__ import annotations

import dataclasses
import os
import re

import h5py
import keras
import numpy as np

from kerasbert.durable import publish
from kerasbert.errors import BackupError
from kerasbert.training.finite import check_finite_weights

_NAME = re.compile(r"^block-(\d{4,})\.weights\.h5$")
PARTIAL_SUFFIX = ".partial.weights.h5"


@dataclasses.dataclass(frozen=True)
class Backup:
    path: str
    blocks_done: int  # whole blocks trained when it was written


def _backups(backup_dir: str) -> list[Backup]:
    if not os.path.isdir(backup_dir):
        return []
    found = [Backup(os.path.join(backup_dir, name), int(match.group(1)))
             for name in os.listdir(backup_dir) if (match := _NAME.match(name))]
    return sorted(found, key=lambda backup: backup.blocks_done, reverse=True)


def damage(path: str) -> str | None:
    """Why the backup file at `path` cannot be restored, or None if every array in it reads."""
    try:
        with h5py.File(path, "r") as f:
            arrays = []
            f.visititems(lambda name, item: arrays.append(item) if isinstance(item, h5py.Dataset) else None)
            if not arrays:
                return "it holds no weights"
            for array in arrays:
                values = array[()]  # reads every byte: a truncated file fails here if not at open
                if np.issubdtype(np.asarray(values).dtype, np.floating) and not np.isfinite(values).all():
                    return f"{array.name} holds NaN or infinite values"
    except (OSError, KeyError, ValueError, RuntimeError) as error:
        return f"{type(error).__name__}: {error}"
    return None


def find_backup(backup_dir: str, log=print) -> Backup | None:
    """The newest backup in `backup_dir` that reads back whole; None if there is none.

    A damaged newer backup is reported through `log` and passed over. Raises BackupError
    when backups exist but none reads: resuming from scratch would silently redo the
    work, so the caller must decide (remove the folder, or --overwrite).
    """
    backups = _backups(backup_dir)
    for backup in backups:
        reason = damage(backup.path)
        if reason is None:
            return backup
        log(f"   backup {backup.path} (after block {backup.blocks_done}) is damaged ({reason}); "
            "trying the one before")
    if backups:
        raise BackupError(f"{backups[0].path}: no backup in {backup_dir} can be read (the newest: "
                          f"{damage(backups[0].path)}). Remove that folder to start again from scratch, "
                          "or pass --overwrite.")
    return None


def restore(model: keras.Model, backup: Backup | None) -> None:
    """Loads `backup` (weights and optimizer state) into a built, compiled model."""
    if backup is None:
        return
    if model.optimizer is not None and not model.optimizer.built:
        model.optimizer.build(model.trainable_variables)
    model.load_weights(backup.path)


class BlockWeights(keras.callbacks.Callback):
    """Writes `block-NNNN.weights.h5` after every block (temporary file, then rename) and
    keeps the newest `keep`; as a backup (`remove_at_end`), removes its files when training
    ends, then the folder and `parent` once they are empty (a worker's folder sits in the
    chief's, and the two end in either order). The same files serve as the run's
    checkpoints with `remove_at_end=False`.

    Example:
    >>> import keras, tensorflow as tf
    >>> keras.utils.set_random_seed(0)
    >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1, name="dense")], name="model")
    >>> data = tf.data.Dataset.from_tensor_slices((tf.ones([8, 3]), tf.ones([8, 1]))).batch(4).repeat()
        >>> model.compile(optimizer="adam", loss="mse")
        >>> history = model.fit(data, epochs=3, steps_per_epoch=2, verbose=0,
        ...                     callbacks=[BlockWeights(f"{tmp_path}/backup", remove_at_end=False)])
        >>> sorted(os.listdir(f"{tmp_path}/backup"))  # the newest 2
        ['block-0002.weights.h5', 'block-0003.weights.h5']
    """

    def __init__(self, backup_dir: str, keep: int = 2, remove_at_end: bool = True, parent: str | None = None):
        super().__init__()
        self.backup_dir, self.keep, self.remove_at_end, self.parent = backup_dir, keep, remove_at_end, parent

    def on_epoch_end(self, epoch, logs=None):
        check_finite_weights(self.model, f"writing the backup of block {epoch + 1} to {self.backup_dir}")
        os.makedirs(self.backup_dir, exist_ok=True)
        path = os.path.join(self.backup_dir, f"block-{epoch + 1:04d}.weights.h5")
        partial = path + PARTIAL_SUFFIX
        self.model.save_weights(partial)
        publish(partial, path)  # synced, then renamed: a reader sees the old set or the new one
        for old in _backups(self.backup_dir)[self.keep:]:
            os.remove(old.path)

    def on_train_end(self, logs=None):
        if self.remove_at_end:
            remove_backups(self.backup_dir, self.parent)


def remove_backups(backup_dir: str, parent: str | None = None) -> None:
    """Removes the files in `backup_dir`, then the folder and `parent` if they are empty.

    Never a whole tree: a chief's `backup/` holds its workers' folders, and a worker may
    still be writing its last block when the chief ends.

    Example:
        >>> remove_backups("runs/x/backup/worker-1", parent="runs/x/backup")
    """
    if os.path.isdir(backup_dir):
        for entry in os.scandir(backup_dir):
            if entry.is_file():
                try:
                    os.remove(entry.path)
                except FileNotFoundError:
                    pass
    for folder in (backup_dir, parent):
        if folder is None:
            continue
        try:
            os.rmdir(folder)
        except OSError:  # not empty (another worker's folder or files) or already gone
            pass


def last_block(backup_dir: str) -> int:
    """The block of the newest backup in `backup_dir`; 0 if there is none."""
    backups = _backups(backup_dir)
    return backups[0].blocks_done if backups else 0
