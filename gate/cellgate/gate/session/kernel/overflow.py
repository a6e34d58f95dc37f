"""A frame over the host's size bound, told apart from a kernel that went away.

Every socket reading from the kernel refuses a frame over ``[sandbox]
max_message_mb`` (``ZMQ_MAXMSGSIZE``) before allocating it; libzmq then ends
that connection and never reconnects. ``watch_overflow`` sees it on the
socket's monitor, and ``reopen`` connects again.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import zmq
import zmq.asyncio
from zmq.utils.monitor import parse_monitor_message

OVERFLOW_EVENTS = zmq.EVENT_DISCONNECTED | zmq.EVENT_CONNECT_RETRIED


def monitor_socket(sock: zmq.asyncio.Socket, events: int) -> zmq.asyncio.Socket:
    """A PAIR socket receiving ``sock``'s monitor events, over a pipe without a high-water mark.

    libzmq sends monitor events with a blocking send from its I/O thread while holding the
    socket's monitor lock: with pyzmq's default pipe (``get_monitor_socket``), a full pipe (a
    reconnecting socket's events nobody read) stops the context's I/O thread and makes
    ``disable_monitor`` and close wait for ever. The events are few and read as they come.
    """
    address = f"inproc://cellgate-monitor-{os.urandom(8).hex()}"
    sock.monitor(address, events)
    monitor: zmq.asyncio.Socket = sock.context.socket(zmq.PAIR)
    monitor.setsockopt(zmq.RCVHWM, 0)  # an inproc pipe is unbounded when either side's HWM is 0
    monitor.connect(address)
    return monitor


async def watch_overflow(monitor: zmq.asyncio.Socket, on_overflow: Callable[[], None]) -> None:
    """Call ``on_overflow`` each time the monitored socket's peer sent a frame over its size bound.

    ``monitor`` watches ``OVERFLOW_EVENTS``. libzmq ends the connection of a peer that sends a
    frame over ZMQ_MAXMSGSIZE as a protocol error, and then never reconnects; a connection
    error (the kernel went away) is followed at once by a retry.
    """
    while True:
        event = parse_monitor_message(await monitor.recv_multipart())
        if event["event"] != zmq.EVENT_DISCONNECTED:
            continue
        # A poll, not asyncio.wait_for: on Python 3.11 wait_for swallows a cancellation that
        # arrives as its inner future completes (CPython gh-86296), and this loop then outlived
        # the kernel it watched, hanging the relay's detach at a session's end.
        if await monitor.poll(1000):
            continue  # libzmq is retrying: not an overflow (the loop reads its event)
        on_overflow()


def reopen(sock: zmq.Socket[Any], endpoint: str) -> None:
    """Connect again after an overflow (libzmq does not, after a protocol error)."""
    try:
        sock.disconnect(endpoint)
    except zmq.ZMQError:
        pass
    sock.connect(endpoint)
