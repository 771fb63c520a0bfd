"""Published files reach the disk before their name does: fsync of the contents, the
rename, then fsync of the folder (kerasbert/durable.py), for backups, best weights, export
versions and metrics.json."""

import os

import pytest

from kerasbert import durable


@pytest.fixture
def disk_log(monkeypatch):
    """Every fsync (by the path of its descriptor) and rename, in order."""
    events = []
    fsync, replace, rename = os.fsync, os.replace, os.rename

    def logged_fsync(fd):
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        fsync(fd)

    monkeypatch.setattr(os, "fsync", logged_fsync)
    monkeypatch.setattr(os, "replace", lambda a, b: (events.append(("rename", str(a), str(b))), replace(a, b))[1])
    monkeypatch.setattr(os, "rename", lambda a, b: (events.append(("rename", str(a), str(b))), rename(a, b))[1])
    return events


def assert_published(events, partial, final, contents):
    """`contents` (paths inside `partial`) synced, then the rename, then `final`'s folder synced."""
    renamed = events.index(("rename", partial, final))
    synced_before = {path for op, path, *_ in events[:renamed] if op == "fsync"}
    assert set(contents) <= synced_before, (contents, synced_before)
    assert ("fsync", os.path.dirname(final)) in events[renamed + 1:]


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc to name descriptors")
def test_json_and_folders_are_synced_before_and_after_the_rename(tmp_path, disk_log):
    path = str(tmp_path / "metrics.json")
    durable.write_json(path, {"a": 1})
    assert_published(disk_log, path + ".partial", path, [path + ".partial"])

    tree = tmp_path / ".1-building"
    (tree / "variables").mkdir(parents=True)
    (tree / "saved_model.pb").write_bytes(b"x")
    (tree / "variables" / "v.index").write_bytes(b"y")
    disk_log.clear()
    durable.publish(str(tree), str(tmp_path / "1"), replace=False)
    assert_published(disk_log, str(tree), str(tmp_path / "1"),
                     [str(tree / "saved_model.pb"), str(tree / "variables" / "v.index"), str(tree / "variables")])


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc to name descriptors")
def test_block_backups_and_exports_go_through_publish(tmp_path, disk_log):
    from helpers import batches, start_run, tiny_model_dir

    from kerasbert.export import export_saved_model

    run, model, data = start_run(tmp_path, batches())
    run.fit(model, data)
    backup = str(tmp_path / "run" / "backup" / "block-0001.weights.h5")
    assert_published(disk_log, backup + ".partial.weights.h5", backup, [backup + ".partial.weights.h5"])

    tiny_model_dir(str(tmp_path / "ft"), "cross")
    disk_log.clear()
    target = export_saved_model(str(tmp_path / "ft"), str(tmp_path / "exports"))
    (rename,) = [event for event in disk_log if event[0] == "rename" and event[2] == target]
    assert_published(disk_log, rename[1], target, [os.path.join(rename[1], "saved_model.pb")])
