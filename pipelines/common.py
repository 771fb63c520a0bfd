"""Flags shared by the pipelines: config file, `--set` overrides, data dir, strategy."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from kerasbert.data.corpus import default_data_dir


def add_common_flags(parser: argparse.ArgumentParser, config_required: bool = True) -> None:
    parser.add_argument("--config", required=config_required,
                        help="JSON config file (see pipelines/configs/).")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="Override one field of the resolved config, e.g. "
                             "--set train.total_steps=400. Repeatable.")
    parser.add_argument("--data_dir", default=default_data_dir(),
                        help="Folder holding cs224n/ and wikitext-2/ (default: $KERASBERT_DATA_DIR "
                             "or ../shared/data).")
    parser.add_argument("--output_dir", required=True, help="Folder for every output of the run.")
    parser.add_argument("--init_checkpoint", default=None,
                        help="Start from this checkpoint: a kerasbert output folder, a keras-hub "
                             "preset (folder or handle), or a Hugging Face BERT folder.")
    parser.add_argument("--strategy", default="default",
                        choices=("default", "mirrored", "multi_worker", "tpu"),
                        help="tf.distribute strategy. multi_worker reads TF_CONFIG.")
    parser.add_argument("--cpu_devices", type=int, default=0,
                        help="With --strategy mirrored on a CPU-only host: split the CPU into this "
                             "many logical devices (for testing).")


def main_guard(run) -> int:
    """Runs `run()`, turning expected errors into one clear line and exit code 2."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        run()
    except (ValueError, FileNotFoundError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0
