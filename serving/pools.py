"""Thread pools started whole, as TF Serving starts its request thread pools: the server's
thread count is fixed from start-up, whatever its clients do.

Example:
    >>> pool = started_pool(8, "rest")  # 8 threads exist now, none will be added
"""

from __future__ import annotations

import concurrent.futures
import threading


def started_pool(workers: int, name: str) -> concurrent.futures.ThreadPoolExecutor:
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
    started = threading.Barrier(workers + 1)
    for _ in range(workers):  # each task holds its thread until all exist
        pool.submit(started.wait)
    started.wait()
    return pool
