"""Writes that survive a power loss: contents synced before the rename that publishes them.

A file written aside and renamed into place is atomic against a crash of the process, but
not against a crash of the machine: the rename can reach the disk before the file's
contents do, leaving a published name over an empty or partial file. `publish` syncs the
file (or every file and folder of a tree) first, renames, then syncs the folder that holds
the new name, so after a power loss the name points at the whole content or is absent.

Example:
    >>> import tempfile
    >>> run = tempfile.mkdtemp()
    >>> with open(os.path.join(run, "block-0003.weights.h5.partial"), "w") as f:  # model.save_weights
    ...     _ = f.write("weights")
    >>> publish(os.path.join(run, "block-0003.weights.h5.partial"), os.path.join(run, "block-0003.weights.h5"))
    >>> write_json(os.path.join(run, "metrics.json"), {"mlm_accuracy": 0.41})
    >>> sorted(os.listdir(run))
    ['block-0003.weights.h5', 'metrics.json']
"""

from __future__ import annotations

import json
import math
import os

from kerasbert.errors import NonFiniteError


def fsync_path(path: str) -> None:
    """Flushes a file's or a folder's entry to the disk (a no-op where folders cannot be
    opened, as on Windows, or for a path another process removed meanwhile)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except (IsADirectoryError, PermissionError, FileNotFoundError):  # gone meanwhile: nothing to sync
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(path: str) -> None:
    """Syncs `path`, and if it is a folder every file and folder beneath it."""
    if not os.path.isdir(path):
        fsync_path(path)
        return
    for folder, _, files in os.walk(path):
        for name in files:
            fsync_path(os.path.join(folder, name))
        fsync_path(folder)


def publish(partial: str, final: str, replace: bool = True) -> None:
    """Renames the written file or folder `partial` to `final` once its contents are on the
    disk, then syncs the folder holding `final`. `replace=False` fails if `final` exists."""
    fsync_tree(partial)
    if replace:
        os.replace(partial, final)
    else:
        os.rename(partial, final)  # POSIX: replaces an empty folder; callers check first
    fsync_path(os.path.dirname(os.path.abspath(final)))


def write_json(path: str, data: dict) -> None:
    """Writes `data` as JSON through a synced temporary file and `publish`. Raises NonFiniteError
    naming the keys whose values are NaN or infinite (JSON has no such numbers)."""
    bad = [key for key, value in data.items() if isinstance(value, float) and not math.isfinite(value)]
    if bad:
        raise NonFiniteError(f"{path}: not written: {', '.join(bad)} not finite ({data[bad[0]]}); "
                             "these results are not usable")
    partial = path + ".partial"
    with open(partial, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, allow_nan=False)
        f.write("\n")
    publish(partial, path)
