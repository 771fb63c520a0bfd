"""The model-memory budget, as TF Serving's ServerCore keeps it (server_core.cc
CreateResourceTracker, core/basic_manager.cc ApproveLoad): a total for every loaded version
(`--total_model_memory_limit_bytes`), each version's RAM estimated from its files before it
loads (servables/tensorflow/util.cc EstimateResourceFromPathUsingDiskState: the size of every
file under the version folder, x 1.2), a load whose estimate does not fit refused
RESOURCE_EXHAUSTED ("Insufficient resources to load servable ..."), its reservation released
when the version unloads. TF Serving's default is no limit; here it is half of the machine's
memory (or of the container's, if lower), so that a ReloadConfig naming 10,000 copies of one
export cannot take the machine down.

Beyond TF Serving: the files' estimate can be far below what a load costs (a tiny kerasbert
export, 0.6 MB of files, grows the server by ~225 MiB: its graph and functions), so a loaded
version is charged the larger of its estimate and what the process grew by while it loaded
and warmed up (`charge`), and a later load of the same path is estimated as that (`measured`).
Loads run one after another by default (--num_load_threads 0), so copies of one export are
admitted one at a time, each against what the last one cost.

Example:
    >>> memory = ModelMemory(limit=1000)
    >>> memory.reserve(("m", 1), 60), memory.charge(("m", 1), "/m/1", grown=600), memory.used
    (True, None, 600)
    >>> memory.reserve(("n", 1), max(60, memory.measured("/m/1")))  # a copy: 600 more do not fit
    False
    >>> memory.release(("m", 1)); memory.used
    0
"""

from __future__ import annotations

import os
import threading

RAM_MULTIPLIER = 1.2  # util.cc kResourceEstimateRAMMultiplier
RAM_PAD_BYTES = 0  # util.cc kResourceEstimateRAMPadBytes
DEFAULT_FRACTION = 0.5  # of the machine's (or container's) memory, when no limit is given


def machine_memory_bytes() -> int:
    """The memory this process may use: the machine's, or its cgroup's limit if lower."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for limit_file in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(limit_file) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
    return total


def default_memory_limit() -> int:
    """--total_model_memory_limit_bytes when it is 0: DEFAULT_FRACTION of machine_memory_bytes()."""
    return int(machine_memory_bytes() * DEFAULT_FRACTION)


def resident_bytes() -> int:
    """This process's resident memory (VmRSS) now; 0 where /proc cannot tell it."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def estimate_ram_bytes(path: str) -> int:
    """TF Serving's RAM estimate of the version at `path`: its files' sizes (every file under
    it, symbolic links followed as TF's file system does), x RAM_MULTIPLIER, + RAM_PAD_BYTES.
    A file that vanishes meanwhile counts 0 (the load then fails on its own)."""
    total = 0
    for folder, _, files in os.walk(path, followlinks=True):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(folder, name))
            except OSError:
                pass
    return int(total * RAM_MULTIPLIER) + RAM_PAD_BYTES


class ModelMemory:
    """TF Serving's ResourceTracker for main-memory bytes: reservations by key (model, version)."""

    def __init__(self, limit: int):
        self.limit = limit
        self._lock = threading.Lock()
        self._reserved: dict = {}
        self._measured: dict[str, int] = {}  # path -> what its last load grew the process by
        self.used = 0

    def reserve(self, key, size: int) -> bool:
        """Reserves `size` bytes for `key` if they fit in what is left; False if not."""
        with self._lock:
            used = self.used - self._reserved.get(key, 0)
            if used + size > self.limit:
                return False
            self.used = used + size
            self._reserved[key] = size
            return True

    def charge(self, key, path: str, grown: int) -> None:
        """After `key`'s load of `path` grew the process by `grown` bytes: charged the larger of
        that and its reservation (even beyond the limit: it is loaded; the next loads are refused),
        and later loads of `path` estimated as it."""
        with self._lock:
            self._measured[path] = grown
            if key in self._reserved and grown > self._reserved[key]:
                self.used += grown - self._reserved[key]
                self._reserved[key] = grown

    def measured(self, path: str) -> int:
        """What the last load of `path` grew the process by (0 before any)."""
        with self._lock:
            return self._measured.get(path, 0)

    def release(self, key) -> None:
        with self._lock:
            self.used -= self._reserved.pop(key, 0)

    def left(self) -> int:
        with self._lock:
            return self.limit - self.used
