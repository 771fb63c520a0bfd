"""The largest request each --max_body_bytes admits, and issue 90's table: its answer and time.

    python -m benchmarks.body_caps [--output_dir runs/bench-body-caps] [--caps 1 4 16 64]

TF Serving's half_plus_two (y = 0.5 x + 2, `x`: float32 [None]), one server per setting, one
request at a time: `{"instances": [0, 0, ...]}` of as many rows as a body within the cap holds
(answered 200, or refused at once with a 4xx naming the --max_body_bytes that admits it), then
issue 90's 4M rows (8 MB) at the default flags and at 16 MiB. `make bench-hostile` runs it.

Example:
    >>> scalars_body(3)
    b'{"instances": [0,0,0]}'
    >>> largest_rows(64)
    24
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

import tensorflow as tf

from benchmarks.results import bench_parser, save_results
from serving.process import LocalServer

TITLE = "The largest request each --max_body_bytes admits (half_plus_two)"
MIB = 1 << 20
ISSUE_ROWS = 4_000_000
ISSUE_TABLE = [  # issue 90's rows: (label, flags)
    ("defaults (only --rest_api_timeout_in_ms=600000)", ["--rest_api_timeout_in_ms=600000"]),
    ("the same plus --max_body_bytes=16777216", ["--rest_api_timeout_in_ms=600000", f"--max_body_bytes={16 * MIB}"]),
    ("--max_body_bytes=16777216, default timeout", [f"--max_body_bytes={16 * MIB}"]),
]


def scalars_body(rows: int) -> bytes:
    return b'{"instances": [' + b",".join([b"0"] * rows) + b"]}"


def largest_rows(cap: int) -> int:
    """The most rows of `scalars_body` within `cap` bytes."""
    return (cap - len(scalars_body(0)) + 1) // 2


def save_half_plus_two(path: str) -> None:
    """TF Serving's half_plus_two with a batch-dimension input, as a TF2 program saves it."""
    module = tf.Module()
    module.a, module.b = tf.Variable(0.5), tf.Variable(2.0)
    module.predict = tf.function(lambda x: {"y": module.a * x + module.b},
                                 input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
    tf.saved_model.save(module, path, signatures={"serving_default": module.predict})


def timed_request(flags: list[str], base: str, rows: int, log_path: str) -> dict:
    """One server with `flags`, one request of `rows` zeros: status, seconds, the error if any."""
    body = scalars_body(rows)
    with LocalServer("half", base, log_path=log_path, extra_flags=flags) as server:
        server.wait_for_version(1)
        status, text, seconds = server.timed_post(":predict", body)
    result = {"flags": " ".join(flags), "rows": rows, "body_bytes": len(body), "status": status,
              "seconds": round(seconds, 2), "answer_bytes": len(text)}
    if status != 200:
        result["error"] = json.loads(text)["error"][:300]
    print(f"{result['flags']}: {rows} rows ({len(body)} bytes): {status} in {seconds:.2f} s", flush=True)
    return result


def measure(work: str, caps_mib: list[int]) -> dict:
    """{"largest": [a row per cap], "issue_90": [a row per flag setting of the issue's table]}."""
    base = os.path.join(work, "half")
    save_half_plus_two(os.path.join(base, "1"))
    log_path = os.path.join(work, "server.log")
    timeout = "--rest_api_timeout_in_ms=600000"
    largest = [timed_request([timeout, f"--max_body_bytes={cap * MIB}"], base, largest_rows(cap * MIB), log_path)
               for cap in caps_mib]
    issue = [dict(timed_request(flags, base, ISSUE_ROWS, log_path), setting=label) for label, flags in ISSUE_TABLE]
    return {"largest": largest, "issue_90": issue}


def main(argv=None) -> int:
    parser = bench_parser("body_caps", __doc__, data_dir=False)
    parser.add_argument("--caps", type=int, nargs="+", default=[1, 4, 16, 64], help="--max_body_bytes values, MiB.")
    args = parser.parse_args(argv)
    os.makedirs(args.output_dir, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kerasbert-bench-body-caps-") as work:
        results = measure(work, args.caps)
    print(save_results(args.output_dir, results, "benchmarks.body_caps", TITLE))
    return 0


if __name__ == "__main__":
    sys.exit(main())
