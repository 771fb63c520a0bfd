"""What connections may hold: REST connections at a cap make room by closing the one idle
longest, and file descriptors are kept free for the server's own work (model loads, the
model poll, logs) whatever clients open.

Why close the idle one: a server that refuses new connections at its cap can be locked out
by anyone who opens that many and sends nothing. aiohttp closes a connection that has no
request under way after its keep-alive timeout (from its accept, or its last response);
between two timeouts, at the cap, the connection idle longest gives way to the new one.
Only when every connection has a request under way is the new one closed.

Example:
    >>> caps = descriptor_caps(rest=1024, grpc=1024)  # raises RLIMIT_NOFILE's soft limit if it must
    >>> caps.rest + caps.grpc + FD_RESERVE <= caps.limit
    True
"""

from __future__ import annotations

import logging
import resource
from typing import NamedTuple

log = logging.getLogger("serving")
FD_RESERVE = 1024  # descriptors never given to connections: model loads, the poll, logs, TensorFlow's own


def idle_since(handler) -> float | None:
    """When the aiohttp connection `handler` last went idle (its accept or its last
    response, in loop time), or None while it has a request under way or is closing.
    aiohttp has no public API for this; its RequestHandler keeps it for its keep-alive
    timer (`_next_keepalive_close_time` is that time plus the timeout, for every open
    connection alike)."""
    if handler._force_close or handler._request_in_progress or handler._messages:
        return None
    return handler._next_keepalive_close_time


def make_room(handlers, cap: int) -> bool:
    """At `cap` open connections, closes the one idle longest; False if none is idle (the
    new connection must then be closed instead).

    >>> make_room([], cap=1)
    True
    """
    open_handlers = [handler for handler in handlers if not handler._force_close]
    if len(open_handlers) < cap:
        return True
    idle = [(since, index) for index, handler in enumerate(open_handlers)
            if (since := idle_since(handler)) is not None]
    if not idle:
        return False
    open_handlers[min(idle)[1]].force_close()
    return True


class DescriptorCaps(NamedTuple):
    rest: int  # REST connections at most
    grpc: int  # gRPC connections at most
    limit: int  # the process's RLIMIT_NOFILE (soft) in force


def descriptor_caps(rest: int, grpc: int, reserve: int = FD_RESERVE, limits: tuple[int, int] | None = None,
                    ) -> DescriptorCaps:
    """Connection caps that leave `reserve` file descriptors free. The soft RLIMIT_NOFILE is
    raised (up to the hard one) to fit `rest` + `grpc` + `reserve`; if the hard limit is
    lower, both caps shrink in proportion, and a line says so. `limits` (soft, hard) stands
    in for the process's own (a test's).

    >>> descriptor_caps(1024, 1024, reserve=1024, limits=(2048, 2048))
    DescriptorCaps(rest=512, grpc=512, limit=2048)
    """
    soft, hard = limits or resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = rest + grpc + reserve
    if limits is None and soft != resource.RLIM_INFINITY and soft < wanted:
        soft = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    elif limits is not None and soft < wanted:
        soft = min(wanted, hard)
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return DescriptorCaps(rest, grpc, soft)
    room = max(2, soft - reserve)
    scaled = DescriptorCaps(max(1, rest * room // (rest + grpc)), max(1, grpc * room // (rest + grpc)), soft)
    log.warning("only %d file descriptors allowed (ulimit -n): REST connections capped at %d, gRPC at %d, "
                "%d kept for model loads", soft, scaled.rest, scaled.grpc, reserve)
    return scaled
