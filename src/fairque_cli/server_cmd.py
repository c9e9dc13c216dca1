"""``fairque server``: the shared local server (run it in the foreground, start, stop, status).

Without ``--url`` every command and ``fairque_redis.connect()`` use this server and start it
on first use; these commands manage it explicitly. See :mod:`fairque_redis.servers.dev_server`.
"""

from __future__ import annotations

import argparse
import json
from typing import TextIO

import attrs

from fairque_cli.context import CliError, SubCommands

__all__ = ["EXIT_NOT_RUNNING", "add_server"]

#: ``fairque server status`` when no server runs (as ``systemctl status`` does).
EXIT_NOT_RUNNING = 3


def _run_server(args: argparse.Namespace, out: TextIO) -> int:
    from fairque_redis.servers import dev_server

    action = args.action or "run"
    if action == "run":

        def announce(url: str) -> None:
            out.write(
                f"fairque local server at {url} (data in {dev_server.data_dir()}); "
                "Ctrl-C stops it\n"
            )
            out.flush()

        return dev_server.run_foreground(announce)
    if action == "start":
        running, started = dev_server.ensure_running()
        verb = "started" if started else "already running:"
        out.write(f"{verb} {running.url} (pid {running.pid}, data in {running.data_dir})\n")
        return 0
    if action == "stop":
        stopped = dev_server.stop()
        if stopped is None:
            out.write("the local server is not running\n")
        else:
            out.write(f"stopped the local server at {stopped.url} (pid {stopped.pid})\n")
        return 0
    if action == "status":
        state = dev_server.status()
        if args.json:
            data = {"running": state is not None, "data_dir": str(dev_server.data_dir())}
            if state is not None:
                data.update(attrs.asdict(state))
            out.write(json.dumps(data, indent=2) + "\n")
        elif state is None:
            out.write(f"not running (data dir {dev_server.data_dir()})\n")
        else:
            mode = "foreground" if state.foreground else "daemon"
            out.write(
                f"running at {state.url} (pid {state.pid}, {mode}, data in {state.data_dir})\n"
            )
        return 0 if state is not None else EXIT_NOT_RUNNING
    if action == "url":
        found = dev_server.status()
        if found is None:
            raise CliError("the local server is not running (`fairque server start` starts it)")
        out.write(found.url + "\n")
        return 0
    raise CliError(f"unknown server action {action!r}")  # pragma: no cover - argparse checks


def add_server(sub: SubCommands) -> None:
    p = sub.add_parser(
        "server",
        help="the shared local Valkey server (run, start, stop, status)",
        description="The per-user local Valkey that every command and connect() use when no "
        "server is named. It keeps its data (append-only file, fsync every second) in "
        "$FAIRQUE_DATA_DIR, else $XDG_DATA_HOME/fairque, else ~/.local/share/fairque. "
        "Without an action it runs in the foreground and prints its URL; 'start' runs it as a "
        "daemon (what the other commands do on first use), 'stop' stops it (queued tasks "
        "stay on disk), 'status' reports it (exit 3 when it is not running), 'url' prints "
        "its URL.",
    )
    p.add_argument("action", nargs="?", choices=("start", "stop", "status", "url"), default=None)
    p.add_argument("--json", action="store_true", help="status: print JSON")
    p.set_defaults(func=_run_server)
