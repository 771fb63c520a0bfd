"""Serving under faults, end to end and short: `python -m benchmarks.faults` against a tiny
export, with every fault of `make bench-faults` (half-copied, deleted and corrupt versions,
models.config changed and broken, SIGKILL and restart) and one bad request in twenty."""

import json
import os
import shutil

import pytest

from conftest import run_main


@pytest.mark.end_to_end
def test_no_good_request_fails_outside_the_restart_window(tmp_path, tiny_export, capsys):
    shutil.copytree(os.path.dirname(tiny_export[1]), tmp_path / "exports")  # the faults change it
    out = tmp_path / "bench"
    # The bench's clients in this process (TensorFlow loaded); the server it faults is its child.
    run_main(["benchmarks.faults", "--export_base", str(tmp_path / "exports"), "--seconds", "10",
              "--clients", "4", "--output_dir", str(out)], capsys, check=True)
    results = json.loads((out / "results.json").read_text())
    faults = [event["fault"] for event in results["events"]]
    assert faults == ["slow_copy", "delete_served", "corrupt", "config_change", "config_broken",
                      "remove_corrupt", "kill"]
    assert all(event["server_up"] for event in results["events"])  # up through everything but the kill
    assert results["server_up_at_end"]
    assert results["events"][0]["new_version_served_after_s"] > 0
    assert results["events"][3]["second_model_served_after_s"] > 0
    good, bad = results["good_requests"], results["bad_requests"]
    assert good["ok"] > 100 and results["good_failed_or_lost_outside_restart"] == 0, results["first_failures_outside"]
    assert bad["sent"] > 5 and bad["other"] == 0, results["first_bad_answers"]  # 4xx + error body, or restarting
    assert "| kill |" in (out / "results.md").read_text()
