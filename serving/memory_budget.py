"""Budgets of bytes for what requests hold in memory, shared by REST and gRPC.

The server keeps three (see `ServerBudgets`): request bodies as they arrive, in two
lanes (small bodies, so a flood of large uploads never shuts out ordinary requests, and
large ones), and what decoding a body, or building a gRPC request's tensors, and then
writing the answer take. A request reserves before it reads or builds anything large,
and holds it until it no longer holds that memory, so whatever clients send, request
data never exceeds the budgets' sum.

Bodies reserve as their bytes arrive, without waiting: a body that finds its lane full
is refused RESOURCE_EXHAUSTED (429) at once, so no request holds part of a body while
waiting for the rest, and a slow client holds only the bytes it has sent. The decode
budget is taken in one piece per step: a request waits for it (the first waiter that
fits is served, so a large request never holds up small ones) until its deadline, then
is refused 429, as TF Serving refuses work past its queues.

Example:
    >>> budget = MemoryBudget(1 << 20)
    >>> with budget.reserve(4096, deadline=time.monotonic() + 1.0) as held:
    ...     held.grow(8192, deadline=time.monotonic() + 1.0)
    >>> budget.used
    0
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
import time

from serving.status import ResourceExhausted, TooLarge

# A REST body of at most this many bytes (by its Content-Length) is received in the small lane.
SMALL_BODY_BYTES = 64 * 1024
# Room in the decoding budget beside 12 bytes per body byte, for the outer containers and keys
# of a body of dense numbers (json_costs.decode_cost), so the largest such body is admitted.
DENSE_BODY_SLACK = 64 * 1024


class _Waiter:
    __slots__ = ("size", "wake")

    def __init__(self, size: int, wake):
        self.size, self.wake = size, wake


class Reservation:
    """Bytes held by one request; `release()` (or leaving its `with`) returns them."""

    def __init__(self, budget: "MemoryBudget", size: int):
        self.budget, self.size = budget, size

    def grow(self, size: int, deadline: float | None) -> None:
        """Holds `size` bytes in all (no-op if already held), waiting until `deadline`."""
        if size > self.size:
            self.budget.take(size - self.size, deadline)
            self.size = size

    async def grow_async(self, size: int, deadline: float | None) -> None:
        if size > self.size:
            await self.budget.take_async(size - self.size, deadline)
            self.size = size

    def try_grow(self, size: int) -> bool:
        """Holds `size` bytes in all if they are free now; False (holding what it held) if not."""
        if size > self.size:
            if not self.budget.try_take(size - self.size):
                return False
            self.size = size
        return True

    def resize(self, size: int, deadline: float | None) -> None:
        """Holds exactly `size` bytes: gives back what is no longer needed, or waits for more."""
        if size < self.size:
            self.budget.give_back(self.size - size)
            self.size = size
        else:
            self.grow(size, deadline)

    async def resize_async(self, size: int, deadline: float | None) -> None:
        if size < self.size:
            self.budget.give_back(self.size - size)
            self.size = size
        else:
            await self.grow_async(size, deadline)

    def release(self) -> None:
        size, self.size = self.size, 0
        if size:
            self.budget.give_back(size)

    def __enter__(self) -> "Reservation":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


@dataclasses.dataclass(frozen=True)
class FlagScale:
    """How a budget's capacity follows a server flag: `per_unit` bytes per unit of --`name`,
    plus `base`; so a refusal can name the setting that would admit the request.

    >>> FlagScale("max_body_bytes", 12, 1024).admitting(12 * 1000 + 1024 + 1)
    1001
    """

    name: str
    per_unit: int
    base: int = 0

    def admitting(self, needed: int) -> int:
        """The least value of the flag whose budget holds `needed` bytes."""
        return -(-(needed - self.base) // self.per_unit)

    def describe(self) -> str:
        return f"{self.per_unit} x --{self.name}" + (f" + {self.base}" if self.base else "")


class MemoryBudget:
    """`flag`: how the capacity follows a server flag, so a refusal names the setting that
    would admit the request."""

    def __init__(self, capacity: int, name: str = "request data", flag: FlagScale | None = None):
        self.capacity, self.name, self.flag = capacity, name, flag
        self.used = 0
        self.peak = 0
        self._lock = threading.Lock()
        self._waiters: list[_Waiter] = []  # in arrival order; the first that fits is served
        self._call = threading.local()  # .held: the Reservations of the call this thread serves (one_call)

    def reserve(self, size: int, deadline: float | None) -> Reservation:
        if size:
            self.take(size, deadline)
        reservation = Reservation(self, size)
        held = getattr(self._call, "held", None)
        if held is not None:
            held.append(reservation)
        return reservation

    async def reserve_async(self, size: int, deadline: float | None) -> Reservation:
        if size:
            await self.take_async(size, deadline)
        return Reservation(self, size)

    @contextlib.contextmanager
    def one_call(self, *held: Reservation):
        """Within it, this thread serves one call (a gRPC request from its parsed message to its
        answer, a REST request from its body to its answer; `held`: what the call reserved
        before, elsewhere): what the call asks for must fit in the budget beside what its
        reservations hold, or is refused at once, never waited for with its share held (it
        would wait for itself, its share held until its deadline, if it has one)."""
        self._call.held = list(held)
        try:
            yield
        finally:
            self._call.held = None

    def _held_by_call(self) -> int:
        held = getattr(self._call, "held", None)
        return sum(reservation.size for reservation in held) if held else 0

    def room(self) -> int:
        """The bytes this thread's call could still be granted: the capacity beside what the
        call holds (the whole capacity outside a call)."""
        return self.capacity - self._held_by_call()

    def _check(self, size: int) -> None:
        beside = self._held_by_call()
        if size + beside > self.capacity:
            what = f" beside the {beside} the call holds" if beside else ""
            admits = ""
            if self.flag:
                admits = (f" ({self.flag.describe()}); --{self.flag.name}={self.flag.admitting(size + beside)} "
                          "or more would admit it")
            raise TooLarge(f"The request needs {size} bytes of memory for its {self.name}{what}, more than the "
                           f"server's budget of {self.capacity} bytes{admits}")

    def _grant(self, size: int) -> bool:
        """Takes `size` if it fits (lock held)."""
        if self.used + size > self.capacity:
            return False
        self.used += size
        self.peak = max(self.peak, self.used)
        return True

    def try_take(self, size: int) -> bool:
        self._check(size)
        with self._lock:
            return self._grant(size)

    def take(self, size: int, deadline: float | None) -> None:
        self._check(size)
        event = threading.Event()
        with self._lock:
            if self._grant(size):
                return
            waiter = _Waiter(size, event.set)
            self._waiters.append(waiter)
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not event.wait(timeout):
            self._abandon(waiter)

    async def take_async(self, size: int, deadline: float | None) -> None:
        self._check(size)
        loop = asyncio.get_running_loop()
        future = loop.create_future()

        def wake():
            loop.call_soon_threadsafe(lambda: future.done() or future.set_result(None))
        with self._lock:
            if self._grant(size):
                return
            waiter = _Waiter(size, wake)
            self._waiters.append(waiter)
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            await asyncio.wait_for(asyncio.shield(future), timeout)
        except (asyncio.TimeoutError, asyncio.CancelledError):
            self._abandon(waiter)

    def _abandon(self, waiter: _Waiter) -> None:
        """A waiter's deadline passed (or its client left): leave the queue, or give back what
        it was granted meanwhile; then refuse the request."""
        with self._lock:
            granted = waiter not in self._waiters
            if not granted:
                self._waiters.remove(waiter)
        if granted:
            self.give_back(waiter.size)
        raise ResourceExhausted(f"Server memory budget for {self.name} exhausted: {waiter.size} bytes could not "
                                f"be had before the request's deadline ({self.used} of {self.capacity} in use)")

    def give_back(self, size: int) -> None:
        with self._lock:
            self.used -= size
            for waiter in list(self._waiters):
                if self._grant(waiter.size):
                    self._waiters.remove(waiter)
                    waiter.wake()


class ServerBudgets:
    """The three budgets of one server, sized from --max_body_bytes (B): decoding 12 B + 64 KiB
    (a body of B dense numbers decodes within 12 B, its few containers and keys within the
    64 KiB: json_costs.decode_cost; each model call without batching reserves its activations
    from it too: session.DirectSession), large bodies 2 B, small bodies 1 MiB. In all, request
    data stays under 14 B + 1.1 MiB.

    >>> budgets = ServerBudgets(4 << 20)
    >>> budgets.decoding.capacity // (4 << 20), budgets.bodies(1 << 20) is budgets.large_bodies
    (12, True)
    """

    def __init__(self, max_body_bytes: int):
        self.decoding = MemoryBudget(12 * max_body_bytes + DENSE_BODY_SLACK, "decoding, model activations and "
                                     "answering", flag=FlagScale("max_body_bytes", 12, DENSE_BODY_SLACK))
        self.large_bodies = MemoryBudget(2 * max_body_bytes, "request bodies being received")
        self.small_bodies = MemoryBudget(1 << 20, "request bodies being received")

    def bodies(self, content_length: int | None) -> MemoryBudget:
        """The lane of a body: small if its Content-Length says so, else large (chunked too)."""
        if content_length is not None and content_length <= SMALL_BODY_BYTES:
            return self.small_bodies
        return self.large_bodies

    @property
    def capacity(self) -> int:
        return self.decoding.capacity + self.large_bodies.capacity + self.small_bodies.capacity
