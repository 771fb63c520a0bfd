"""`tf.distribute` strategies by name: default, mirrored, multi_worker, tpu.

Call `make_strategy` before any other TensorFlow work: splitting the CPU into
logical devices (for testing `mirrored` on one machine) must happen before the
runtime initialises its devices.

Example:
    >>> strategy = make_strategy("mirrored")  # cpu_devices=2, before any other TensorFlow work: 2 replicas
    >>> strategy.num_replicas_in_sync  # one CPU
    1
"""

from __future__ import annotations

import json
import os

import tensorflow as tf

from kerasbert.errors import ConfigError

STRATEGIES = ("default", "mirrored", "multi_worker", "tpu")


def split_cpu(num_devices: int) -> list[str]:
    """Splits the physical CPU into `num_devices` logical devices; returns their names."""
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(num_devices)])
    return [d.name for d in tf.config.list_logical_devices("CPU")]


def make_strategy(name: str, cpu_devices: int = 0) -> tf.distribute.Strategy:
    """Builds the named strategy.

    Args:
        name: default | mirrored | multi_worker | tpu.
        cpu_devices: with `mirrored` and no GPU, split the CPU into this many
            logical devices (0: use the local GPUs, or the one CPU).

    Example:
        >>> import keras
        >>> with make_strategy("default").scope():
        ...     model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])  # your model
        >>> model.count_params()
        4
    """
    if name not in STRATEGIES:
        raise ConfigError(f"strategy must be one of {STRATEGIES}. Received: strategy={name!r}")
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        if cpu_devices > 1 and not tf.config.list_physical_devices("GPU"):
            return tf.distribute.MirroredStrategy(split_cpu(cpu_devices))
        return tf.distribute.MirroredStrategy()
    if name == "multi_worker":
        if "TF_CONFIG" not in os.environ:
            raise ConfigError("strategy=multi_worker reads the cluster from the TF_CONFIG "
                              "environment variable, which is not set.")
        from kerasbert.compat.keras import install_multiworker_fit

        install_multiworker_fit()
        return tf.distribute.MultiWorkerMirroredStrategy()
    # TPU: the documented resolve -> connect -> initialise sequence.
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver()
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    return tf.distribute.TPUStrategy(resolver)


def worker_info() -> tuple[int, bool]:
    """(task index, is_chief) of this process from TF_CONFIG; (0, True) without it."""
    config = json.loads(os.environ.get("TF_CONFIG", "{}"))
    task = config.get("task", {})
    task_type, index = task.get("type", "worker"), int(task.get("index", 0))
    has_chief = "chief" in config.get("cluster", {})
    is_chief = task_type == "chief" or (not has_chief and task_type == "worker" and index == 0)
    return index, is_chief
