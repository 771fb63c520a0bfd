"""Peak memory of one call of an exported signature, alone: a fresh process that imports only
tensorflow and tensorflow_text loads the SavedModel, warms the signature up on a short input,
then calls it once on the given input; what the call added to the process's peak RSS is the
figure (no server, so TF Serving would need as much).

    python -m benchmarks.call_memory --version_dir saved_models/kerasbert/1 --signature entities --megabytes 1 [--json]

In Python: `call_peak_bytes(version_dir, "entities", {"text": [hostile_text(1.0)]})` returns
{"peak_bytes", "seconds", "outputs"}.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

# Run in the fresh process: argv[1] the version folder, argv[2] the signature, stdin the
# inputs as JSON ({name: [strings]}); prints {"peak_bytes", "seconds", "outputs"} (outputs:
# each output's shape, and its values when small).
_CHILD = r"""
import json, sys, time
import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401 (the export's ops)

def status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key + ":"))

inputs = {name: tf.constant(values) for name, values in json.load(sys.stdin).items()}
function = tf.saved_model.load(sys.argv[1]).signatures[sys.argv[2]]
function(**{name: tf.constant([b"a b"] * len(value.numpy())) for name, value in inputs.items()})  # warm-up
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # peak RSS := RSS now
before, started = status("VmRSS"), time.monotonic()
outputs = function(**inputs)
seconds, peak = time.monotonic() - started, status("VmHWM") - before
print(json.dumps({"peak_bytes": peak, "seconds": round(seconds, 2), "outputs": {
    name: value.numpy().tolist() if value.shape.num_elements() <= 16 else list(value.shape)
    for name, value in outputs.items() if value.dtype != tf.string}}))
"""


def call_peak_bytes(version_dir: str, signature: str, inputs: dict[str, list[str]], timeout: float = 600) -> dict:
    """{"peak_bytes", "seconds", "outputs"} of one call of `signature` on `inputs`, measured in
    a fresh process (see the module's docstring)."""
    done = subprocess.run([sys.executable, "-c", _CHILD, version_dir, signature], input=json.dumps(inputs),
                          capture_output=True, text=True, timeout=timeout)
    if done.returncode:
        raise RuntimeError(f"the call failed ({done.returncode}): {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def hostile_text(megabytes: float) -> str:
    """One text of `megabytes` MB that is a single word of one-character word pieces ("a,a,a,"):
    the most pieces a byte can give, and a word as long as the text."""
    return "a," * int(megabytes * (1 << 20) / 2)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--version_dir", required=True)
    parser.add_argument("--signature", default="entities")
    parser.add_argument("--megabytes", type=float, default=1.0)
    parser.add_argument("--json", action="store_true", help="Print the measurement as JSON.")
    args = parser.parse_args(argv)
    text = hostile_text(args.megabytes)
    inputs = {"question": ["what?"], "context": [text]} if args.signature == "answer" else {"text": [text]}
    result = call_peak_bytes(args.version_dir, args.signature, inputs)
    if args.json:
        print(json.dumps(result))
        return
    print(f"{args.signature} on one {args.megabytes:g} MB text: peak +{result['peak_bytes'] / 2**20:.0f} MiB, "
          f"{result['seconds']:.1f} s ({result['outputs']})")


if __name__ == "__main__":
    main()
