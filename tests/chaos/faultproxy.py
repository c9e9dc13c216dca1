"""A TCP proxy for chaos tests: sits between clients and a real Redis/Valkey server on loopback.

One background thread runs a ``selectors`` loop over every socket; other threads switch its mode
at run time (the switch is applied by the loop thread and has taken effect when the call
returns):

- ``pass_through()``: forward bytes both ways;
- ``delay(ms)``: hold every client->server chunk ``ms`` milliseconds before forwarding it, so a
  round trip takes ``ms`` longer (order is kept);
- ``blackhole()``: accept and read, forward nothing. A connection that lost a byte this way
  stays a blackhole until its client closes it (the request it sent never gets an answer, as
  with a network that drops packets: only the client's socket timeout ends the wait); new
  connections are accepted and never reach the server;
- ``reset()``: every open connection and every new one is closed with a TCP RST
  (``SO_LINGER`` 0); ``reset_connections()`` does that once, in any mode;
- ``swallow_reply_if(pred, limit=None)``: orthogonal to the mode. Each request (a RESP command,
  ``list[bytes]``) is shown to ``pred`` as it passes; when ``pred`` says True the request still
  reaches the server, but its reply is dropped and the client connection is reset, so the
  client sees a connection error for a command the server DID run (experiment E4). Requests
  and replies are paired by parsing RESP in both directions. ``swallowed`` lists what was
  dropped (command, reply, time).

``FaultProxy`` is a context manager; ``close()`` stops the thread and closes every socket.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from queue import SimpleQueue
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

__all__ = ["FaultProxy", "RespError", "RespParser", "RespPush", "Swallowed", "evalsha_of"]

Command = list[bytes]
Predicate = Callable[[Command], bool]

_CHUNK = 65536
_CONNECT_TIMEOUT = 2.0


# ---- RESP parsing ------------------------------------------------------------------------------


class RespError(bytes):
    """An error reply (``-ERR ...``), kept apart from a simple string."""


class RespPush(list[Any]):
    """An out-of-band RESP3 push (``>``) or attribute (``|``): not the reply to a request."""


class _Incomplete(Exception):
    """Not enough bytes yet for one whole value."""


class RespProtocolError(Exception):
    """Bytes that are not RESP: the connection is forwarded raw from then on."""


def _parse_value(buf: bytearray, pos: int) -> tuple[Any, int]:
    end = buf.find(b"\r\n", pos)
    if end < 0:
        raise _Incomplete
    kind = buf[pos : pos + 1]
    line = bytes(buf[pos + 1 : end])
    pos = end + 2
    if kind == b"-":
        return RespError(line), pos
    if kind == b":":
        return int(line), pos
    if kind in (b"+", b",", b"(", b"#", b"_"):
        return line, pos
    if kind in (b"$", b"=", b"!"):
        size = int(line)
        if size < 0:
            return None, pos
        if len(buf) < pos + size + 2:
            raise _Incomplete
        return bytes(buf[pos : pos + size]), pos + size + 2
    if kind in (b"*", b"~", b">", b"%", b"|"):
        count = int(line)
        if count < 0:
            return None, pos
        if kind in (b"%", b"|"):
            count *= 2
        items: list[Any] = RespPush() if kind in (b">", b"|") else []
        for _ in range(count):
            item, pos = _parse_value(buf, pos)
            items.append(item)
        return items, pos
    raise RespProtocolError(f"not RESP: {bytes(buf[pos - 2 - len(line) : end])[:40]!r}")


class RespParser:
    """Incremental RESP parser: ``feed`` bytes, get the complete values with their raw bytes.

    ``requests=True`` also accepts inline commands (a line of words), which clients may send.
    """

    def __init__(self, *, requests: bool = False) -> None:
        self._buf = bytearray()
        self._requests = requests

    def feed(self, data: bytes) -> list[tuple[Any, bytes]]:
        self._buf += data
        out: list[tuple[Any, bytes]] = []
        pos = 0
        while pos < len(self._buf):
            start = pos
            try:
                if self._requests and self._buf[pos : pos + 1] != b"*":
                    end = self._buf.find(b"\r\n", pos)
                    if end < 0:
                        raise _Incomplete
                    value: Any = bytes(self._buf[pos:end]).split()
                    pos = end + 2
                else:
                    value, pos = _parse_value(self._buf, pos)
            except _Incomplete:
                pos = start
                break
            except ValueError as exc:
                raise RespProtocolError(str(exc)) from exc
            out.append((value, bytes(self._buf[start:pos])))
        del self._buf[:pos]
        return out

    @property
    def pending(self) -> int:
        """Bytes of an incomplete value still buffered."""
        return len(self._buf)


def evalsha_of(sha: str, function: str | None = None) -> Predicate:
    """A predicate matching ``EVALSHA <sha> ...`` (the calls of one registered script) and,
    given its function name, ``FCALL <function> ...`` (the same script as a Redis Function,
    ADR 41)."""
    wanted = {(b"EVALSHA", sha.encode())}
    if function is not None:
        wanted.add((b"FCALL", function.encode()))

    def pred(command: Command) -> bool:
        return len(command) > 1 and (command[0].upper(), command[1]) in wanted

    return pred


# ---- the proxy ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Swallowed:
    """A reply the proxy dropped: the command, the reply the server gave, when (time.time())."""

    command: Command
    reply: Any
    at: float


def _rst_close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()


class _Pipe:
    """One client connection and its connection to the server."""

    def __init__(self, client: socket.socket, upstream: socket.socket | None) -> None:
        self.client = client
        self.upstream = upstream
        self.to_client = bytearray()
        self.to_server = bytearray()
        self.held: deque[tuple[float, bytes]] = deque()  # delayed client->server chunks
        self.requests: RespParser | None = RespParser(requests=True)
        self.replies: RespParser | None = RespParser()
        # one entry per request in flight, in order: the command when its reply is to be
        # swallowed, else None
        self.pending: deque[Command | None] = deque()
        self.events: dict[socket.socket, int] = {}
        self.dead = upstream is None  # a blackhole for good
        self.closed = False


class FaultProxy:
    """A TCP proxy on 127.0.0.1 (a free port) in front of ``upstream`` (``host, port`` or a
    ``redis://`` URL), with run-time switchable faults; see the module docstring."""

    def __init__(self, upstream: tuple[str, int] | str) -> None:
        if isinstance(upstream, str):
            parts = urlsplit(upstream)
            upstream = (parts.hostname or "127.0.0.1", parts.port or 6379)
        self.upstream = upstream
        self._listener: socket.socket | None = None
        self._sel: selectors.DefaultSelector | None = None
        self._wake_r: socket.socket | None = None
        self._wake_w: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._commands: SimpleQueue[tuple[Callable[[], Any], threading.Event, list[Any]]] = (
            SimpleQueue()
        )
        self._stopping = False
        self._pipes: set[_Pipe] = set()
        # loop-thread state, changed only through _call
        self._mode = "pass"
        self._delay = 0.0
        self._pred: Predicate | None = None
        self._limit: int | None = None
        # read by other threads under the lock
        self._lock = threading.Lock()
        self._swallowed: list[Swallowed] = []
        self._errors: list[BaseException] = []
        self.accepted = 0
        self.resets = 0
        self.port = 0

    # ---- lifecycle ---------------------------------------------------------------------------

    def start(self) -> FaultProxy:
        if self._thread is not None:
            raise RuntimeError("the proxy was already started")
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(128)
        listener.setblocking(False)
        self.port = listener.getsockname()[1]
        self._listener = listener
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._sel = selectors.DefaultSelector()
        self._sel.register(listener, selectors.EVENT_READ, "accept")
        self._sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._thread = threading.Thread(target=self._loop, name="faultproxy", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop the loop thread and close every socket (idempotent)."""
        thread = self._thread
        if thread is None:
            return
        self._stopping = True
        self._poke()
        thread.join(10)
        if thread.is_alive():
            raise RuntimeError("the proxy thread did not stop")
        self._thread = None
        for pipe in list(self._pipes):
            self._drop(pipe, rst=True)
        assert self._sel is not None
        self._sel.close()
        for sock in (self._listener, self._wake_r, self._wake_w):
            if sock is not None:
                sock.close()
        self._listener = self._wake_r = self._wake_w = None

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    # ---- control (any thread) ----------------------------------------------------------------

    def pass_through(self) -> None:
        self._call(lambda: self._set_mode("pass"))

    def delay(self, ms: float) -> None:
        self._call(lambda: self._set_mode("delay", ms / 1000.0))

    def blackhole(self) -> None:
        self._call(lambda: self._set_mode("blackhole"))

    def reset(self) -> None:
        """Reset mode: every open and every new connection is closed with an RST."""
        self._call(lambda: self._set_mode("reset"))

    def reset_connections(self) -> int:
        """Close every open connection with an RST once (the mode stays); returns how many."""
        return int(self._call(self._reset_all))

    def swallow_reply_if(self, pred: Predicate, *, limit: int | None = None) -> None:
        """Drop the reply of every request ``pred`` matches (at most ``limit`` of them) and
        reset that connection. Replaces an earlier predicate."""

        def arm() -> None:
            self._pred = pred
            self._limit = limit

        self._call(arm)

    def stop_swallowing(self) -> None:
        def disarm() -> None:
            self._pred = None
            self._limit = None

        self._call(disarm)

    @property
    def mode(self) -> str:
        return self._mode

    @property
    def swallowed(self) -> list[Swallowed]:
        with self._lock:
            return list(self._swallowed)

    @property
    def errors(self) -> list[BaseException]:
        """Exceptions the loop caught while handling a connection (each dropped it): a proxy
        bug, which a test should see apart from the faults it injects."""
        with self._lock:
            return list(self._errors)

    @property
    def open_connections(self) -> int:
        return int(self._call(lambda: len(self._pipes)))

    def _call(self, fn: Callable[[], Any]) -> Any:
        if self._thread is None:
            raise RuntimeError("the proxy is not running")
        done = threading.Event()
        box: list[Any] = []
        self._commands.put((fn, done, box))
        self._poke()
        if not done.wait(10):
            raise RuntimeError("the proxy loop did not answer")
        if box and isinstance(box[0], BaseException):
            raise box[0]
        return box[0] if box else None

    def _poke(self) -> None:
        if self._wake_w is not None:
            with contextlib.suppress(OSError):
                self._wake_w.send(b"x")

    # ---- the loop (proxy thread only) --------------------------------------------------------

    def _set_mode(self, mode: str, delay: float = 0.0) -> None:
        self._mode = mode
        self._delay = delay
        if mode == "reset":
            self._reset_all()

    def _reset_all(self) -> int:
        pipes = list(self._pipes)
        for pipe in pipes:
            self._drop(pipe, rst=True)
        with self._lock:
            self.resets += len(pipes)
        return len(pipes)

    def _loop(self) -> None:
        assert self._sel is not None
        while not self._stopping:
            timeout = None
            if any(pipe.held for pipe in self._pipes):
                first = min(pipe.held[0][0] for pipe in self._pipes if pipe.held)
                timeout = max(0.0, first - time.monotonic())
            for key, mask in self._sel.select(timeout):
                if key.data == "accept":
                    self._accept()
                elif key.data == "wake":
                    self._run_commands()
                else:
                    pipe, side = key.data
                    try:
                        if not pipe.closed and mask & selectors.EVENT_READ:
                            self._on_read(pipe, side)
                        if not pipe.closed and mask & selectors.EVENT_WRITE:
                            self._flush(pipe)
                    except Exception as exc:  # a proxy bug: drop the pipe, keep serving
                        with self._lock:
                            self._errors.append(exc)
                        self._drop(pipe, rst=True)
            self._release_held()
        self._run_commands()

    def _run_commands(self) -> None:
        assert self._wake_r is not None
        with contextlib.suppress(BlockingIOError, OSError):
            while self._wake_r.recv(4096):
                pass
        while not self._commands.empty():
            fn, done, box = self._commands.get()
            try:
                box.append(fn())
            except BaseException as exc:  # handed to the caller
                box.append(exc)
            done.set()

    def _accept(self) -> None:
        assert self._listener is not None
        while True:
            try:
                client, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            with self._lock:
                self.accepted += 1
            if self._mode == "reset":
                _rst_close(client)
                with self._lock:
                    self.resets += 1
                continue
            upstream: socket.socket | None = None
            if self._mode != "blackhole":
                try:
                    upstream = socket.create_connection(self.upstream, timeout=_CONNECT_TIMEOUT)
                except OSError:
                    _rst_close(client)
                    continue
                upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                upstream.setblocking(False)
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            client.setblocking(False)
            pipe = _Pipe(client, upstream)
            self._pipes.add(pipe)
            self._register(pipe)

    def _register(self, pipe: _Pipe) -> None:
        assert self._sel is not None
        for side, sock, out in (
            ("client", pipe.client, pipe.to_client),
            ("upstream", pipe.upstream, pipe.to_server),
        ):
            if sock is None:
                continue
            events = selectors.EVENT_READ | (selectors.EVENT_WRITE if out else 0)
            current = pipe.events.get(sock)
            if current == events:
                continue
            if current is None:
                self._sel.register(sock, events, (pipe, side))
            else:
                self._sel.modify(sock, events, (pipe, side))
            pipe.events[sock] = events

    def _drop(self, pipe: _Pipe, *, rst: bool) -> None:
        if pipe.closed:
            return
        pipe.closed = True
        self._pipes.discard(pipe)
        for sock in (pipe.client, pipe.upstream):
            if sock is None:
                continue
            if self._sel is not None:
                with contextlib.suppress(KeyError, ValueError):
                    self._sel.unregister(sock)
            if rst:
                _rst_close(sock)
            else:
                with contextlib.suppress(OSError):
                    sock.close()

    def _on_read(self, pipe: _Pipe, side: str) -> None:
        sock = pipe.client if side == "client" else pipe.upstream
        assert sock is not None
        try:
            data = sock.recv(_CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(pipe, rst=True)
            return
        if not data:
            if side == "upstream" and pipe.to_client and not pipe.dead:
                self._flush(pipe)
            self._drop(pipe, rst=False)
            return
        if pipe.dead or self._mode == "blackhole":
            pipe.dead = True  # bytes lost: this connection never recovers
            pipe.held.clear()
            return
        if side == "client":
            self._from_client(pipe, data)
        else:
            self._from_server(pipe, data)

    def _from_client(self, pipe: _Pipe, data: bytes) -> None:
        if pipe.requests is not None:
            try:
                commands = pipe.requests.feed(data)
            except RespProtocolError:
                pipe.requests = pipe.replies = None  # raw forwarding, no pairing
                pipe.pending.clear()
            else:
                for command, _raw in commands:
                    pipe.pending.append(self._to_swallow(command))
        if self._mode == "delay" or pipe.held:
            pipe.held.append((time.monotonic() + self._delay, data))
        else:
            pipe.to_server += data
            self._flush(pipe)

    def _to_swallow(self, command: Any) -> Command | None:
        if self._pred is None or self._limit == 0:
            return None
        words = [w if isinstance(w, bytes) else str(w).encode() for w in command]
        if not self._pred(words):
            return None
        if self._limit is not None:
            self._limit -= 1
        return words

    def _from_server(self, pipe: _Pipe, data: bytes) -> None:
        if pipe.replies is None:
            pipe.to_client += data
            self._flush(pipe)
            return
        try:
            replies = pipe.replies.feed(data)
        except RespProtocolError:
            pipe.requests = pipe.replies = None
            pipe.to_client += data
            self._flush(pipe)
            return
        for reply, raw in replies:
            if isinstance(reply, RespPush):  # out of band: answers no request
                pipe.to_client += raw
                continue
            command = pipe.pending.popleft() if pipe.pending else None
            if command is not None:
                self._flush(pipe)  # the replies before this one still reach the client
                with self._lock:
                    self._swallowed.append(Swallowed(command, reply, time.time()))
                self._drop(pipe, rst=True)
                return
            pipe.to_client += raw
        self._flush(pipe)

    def _release_held(self) -> None:
        now = time.monotonic()
        for pipe in list(self._pipes):
            if pipe.held and self._mode == "blackhole":
                pipe.held.clear()  # requests still held when the blackhole began are lost
                pipe.dead = True
                continue
            moved = False
            while pipe.held and pipe.held[0][0] <= now:
                pipe.to_server += pipe.held.popleft()[1]
                moved = True
            if moved:
                self._flush(pipe)

    def _flush(self, pipe: _Pipe) -> None:
        for sock, out in ((pipe.upstream, pipe.to_server), (pipe.client, pipe.to_client)):
            if sock is None or not out or pipe.closed:
                continue
            try:
                sent = sock.send(out)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError:
                self._drop(pipe, rst=True)
                return
            del out[:sent]
        if not pipe.closed:
            self._register(pipe)
