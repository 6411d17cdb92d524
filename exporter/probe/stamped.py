"""Plain-TCP connections whose reads carry the kernel's receive time: the socket as the transport its
protocol writes to (``StampedSocket``), and its connect (``open_stamped``).

Why: a stamp taken when the event loop gets round to a socket is as late as the loop is busy. Linux
stamps every packet when it arrives (``SO_TIMESTAMPNS``) and hands the stamp of the last packet a read
consumed to ``recvmsg``; such a socket's reads do not go through the event loop's transports but
through ``socket_reads.py``, which reads every stamped socket of a loop together in paced batches (in C
where ``_reads.c`` was built) and explains the pacing, the stamps' arithmetic and keep mode. Writes go
through the loop as usual.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Sequence
from typing import Any

from exporter.probe.socket_reads import (
    SO_TIMESTAMPNS,
    Clock,
    KeepMode,
    SocketReads,
    StampedProtocol,
    loop_reads,
)


class StampedSocket(asyncio.Transport):
    """A connected non-blocking TCP socket, as the transport its protocol writes to; reads come from
    ``SocketReads``. Writes go out at once; what the kernel does not take waits for writability."""

    def __init__(self, sock: socket.socket, protocol: StampedProtocol, reads: SocketReads) -> None:
        super().__init__()
        self.sock = sock
        self.fileno = sock.fileno()
        self.protocol = protocol
        self._reads = reads
        self._loop = reads._loop
        self._pending = bytearray()  # written, not yet taken by the kernel
        self._closing = False
        self._closed = False
        self._close_when_sent = False
        self.last_stamp = 0.0  # of the latest read: the next one is never earlier
        self.added_at = 0.0  # when its reads began (set by SocketReads.add): no earlier poll saw it
        self.drained = True  # its last read took all that waited (not a whole buffer's worth)
        self.early = 0  # its reads whose kernel stamp was impossibly early (the Python reads count here)

    def start(self) -> None:
        self.protocol.connection_made(self)
        self._reads.add(self)

    def keep(self, mode: KeepMode) -> bool:
        """Keep this socket's whole-chunk reads in ``mode.kept`` (``NativeSocketReads.keep``) until a
        read of another shape or ``unkeep``; False when its reads have no keep mode (in Python)."""
        return not self._closed and self._reads.keep(self, mode)

    def unkeep(self) -> None:
        """Hand every read to the protocol again."""
        if not self._closed:
            self._reads.unkeep(self)

    def early_stamps(self) -> int:
        """How many of its reads so far had a kernel stamp impossibly early (``socket_reads.early_stamp``)."""
        return self._reads.early_of(self)

    def catch_up(self) -> None:
        """Take in now what waits in the socket (reads are paced): a keep-alive connection's FIN must be
        seen before the connection is handed out again, not after a request was written to it."""
        if not self._closed:
            self._reads.read_now(self)

    # -- asyncio.Transport ------------------------------------------------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing:
            return
        if not self._pending:
            try:
                sent = self.sock.send(data)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError as exc:
                self.lose(exc)
                return
            data = memoryview(data)[sent:]
            if not data:
                return
            self._loop.add_writer(self.fileno, self._send_pending)
        self._pending += data

    def _send_pending(self) -> None:
        try:
            sent = self.sock.send(self._pending)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self.lose(exc)
            return
        del self._pending[:sent]
        if not self._pending:
            self._loop.remove_writer(self.fileno)
            if self._close_when_sent:
                self.lose(None)

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        if self._pending:
            self._close_when_sent = True
        else:
            self._loop.call_soon(self.lose, None)

    def abort(self) -> None:
        self._closing = True
        self.lose(None)

    def get_extra_info(self, name: str, default: object = None) -> object:
        if name == "socket":
            return self.sock
        if name == "peername":
            with contextlib.suppress(OSError):
                return self.sock.getpeername()
        return default

    def lose(self, exc: Exception | None) -> None:
        if self._closed:
            return
        self._closed = self._closing = True
        self._reads.remove(self.fileno)
        if self._pending:
            self._loop.remove_writer(self.fileno)
            self._pending.clear()
        self.sock.close()
        self.protocol.connection_lost(exc)


async def open_stamped(host: str, port: int, protocol: StampedProtocol, clock: Clock) -> StampedSocket:
    """Connect to ``host:port`` (every address it resolves to, in order, like ``create_connection``)
    with kernel receive stamps on, and start feeding ``protocol``."""
    loop = asyncio.get_running_loop()
    infos = await _addresses(loop, host, port)
    if not infos:
        raise OSError(f"getaddrinfo({host!r}) returned nothing")
    errors: list[OSError] = []
    try:
        return await _connect_first(loop, infos, protocol, clock, errors)
    finally:
        errors.clear()  # an error's traceback holds this frame: a list that held it would be a cycle


async def _connect_first(
    loop: asyncio.AbstractEventLoop,
    infos: Sequence[tuple[socket.AddressFamily, socket.SocketKind, int, str, Any]],
    protocol: StampedProtocol,
    clock: Clock,
    errors: list[OSError],
) -> StampedSocket:
    """The first of ``infos`` that connects, stamped and started; the errors of those before it go to
    ``errors``."""
    assert SO_TIMESTAMPNS is not None
    for family, kind, proto, _name, address in infos:
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            await loop.sock_connect(sock, address)
        except OSError as exc:
            sock.close()
            errors.append(exc)
            continue
        except BaseException:
            sock.close()
            raise
        stamped = StampedSocket(sock, protocol, loop_reads(clock))
        stamped.start()
        return stamped
    if len(errors) == 1:
        raise errors[0]
    raise OSError(f"Multiple exceptions: {', '.join(str(e) for e in errors)}")


async def _addresses(
    loop: asyncio.AbstractEventLoop, host: str, port: int
) -> Sequence[tuple[socket.AddressFamily, socket.SocketKind, int, str, Any]]:
    """``host``'s addresses: an IP literal at once, a name through the loop's resolver (a thread)."""
    try:
        return socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP, flags=socket.AI_NUMERICHOST
        )
    except socket.gaierror:
        return await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
