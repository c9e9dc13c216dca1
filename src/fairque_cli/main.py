"""The ``fairque`` command: argument parsing, dispatch, and one-line errors.

Every subcommand lives in its own module and registers itself with ``add_<name>(sub)``. A
mistake of the user (unreachable server, bad config, bad id, bad flag value) ends with ONE line
on stderr and a non-zero exit status, never a traceback; ``FAIRQUE_DEBUG=1`` shows the
traceback for bug reports.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Sequence
from typing import Any, NoReturn, TextIO

from fairque_cli.checks import check_queue_spec, check_url
from fairque_cli.context import CliError, UsageError, error_name

__all__ = [
    "EXIT_ERROR",
    "EXIT_INTERRUPTED",
    "EXIT_USAGE",
    "build_parser",
    "describe_error",
    "main",
]

EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
_MAX_MESSAGE = 400


class _Queues(argparse.Action):
    """``--queue`` before or after the subcommand. A command serves one queue; ``fairque
    worker`` may serve several (``--queue a:3 --queue b:1``, a weight after a colon, ADR 69),
    so the count is checked once the command is known (:meth:`_Parser.check_queues`): a second
    ``--queue`` elsewhere (which used to win silently) is a usage error.

    ``seen`` is shared by the top-level parser and every subcommand's copy of the option
    (argparse parses a subcommand's flags into a namespace of its own); ``queue`` gets the
    name of the last one given."""

    def __init__(self, *args: Any, seen: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seen = seen

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        self.seen.append(str(values))
        setattr(namespace, self.dest, str(values).partition(":")[0])


def _common_options(defaults: bool, queues: list[str]) -> argparse.ArgumentParser:
    """``--url``/``--queue``/``--config``, accepted before or after the subcommand."""
    parent = _Parser(add_help=False)
    default = None if defaults else argparse.SUPPRESS
    parent.add_argument(
        "--url",
        default=default,
        type=check_url,
        help="Redis/Valkey URL (default: $FAIRQUE_REDIS_URL, then the config file, then the "
        "shared local server: see `fairque server`)",
    )
    parent.add_argument(
        "--queue",
        default=default,
        type=check_queue_spec,
        action=_Queues,
        seen=queues,
        help="queue name (default: the config's; given once, except to `worker`, which "
        "serves each --queue NAME[:WEIGHT] given)",
    )
    parent.add_argument(
        "--cluster",
        action="store_true",
        default=False if defaults else argparse.SUPPRESS,
        help="the URL is a node of a Redis/Valkey Cluster (use a cluster client)",
    )
    parent.add_argument(
        "--config",
        default=default,
        metavar="FILE",
        help="YAML config with redis/worker/queue sections (default: $FAIRQUE_CONFIG)",
    )
    return parent


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line: ``fairque CMD: error: ...``.

    The top-level one (``queues`` set) checks the ``--queue`` flags once the command is known:
    ``worker`` takes any number (its ``queues`` attribute lists them, ``NAME[:WEIGHT]``), every
    other command one, without a weight."""

    queues: list[str] | None = None

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.prog}: error: {message} (see: {self.prog} --help)\n")
        raise SystemExit(EXIT_USAGE)

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        if self.queues is not None:
            self.queues.clear()
        parsed, extra = super().parse_known_args(args, namespace)
        if self.queues is not None:
            self.check_queues(parsed, self.queues)
        return parsed, extra

    def check_queues(self, parsed: argparse.Namespace, seen: list[str]) -> None:
        worker = getattr(parsed, "command", None) == "worker"
        if len(seen) > 1 and not worker:
            self.error(
                f"--queue given {len(seen)} times ({', '.join(seen)}): a command serves one "
                "queue (only `fairque worker` serves several)"
            )
        weighted = [spec for spec in seen if ":" in spec]
        if weighted and not worker:
            self.error(f"--queue {weighted[0]}: a weight is for `fairque worker` only")
        parsed.queues = list(seen)


def build_parser() -> argparse.ArgumentParser:
    from fairque_cli import __version__
    from fairque_cli.commands import add_dlq, add_push, add_stats
    from fairque_cli.dashboard_cmd import add_dashboard
    from fairque_cli.demo_cmd import add_demo
    from fairque_cli.doctor_cmd import add_doctor
    from fairque_cli.events_cmd import add_events
    from fairque_cli.exporter_cmd import add_exporter
    from fairque_cli.limits_cmd import add_limits
    from fairque_cli.operator_cmd import add_operator_commands
    from fairque_cli.pause_cmd import add_pause
    from fairque_cli.schedule_cmd import add_schedule, add_scheduler
    from fairque_cli.server_cmd import add_server
    from fairque_cli.tasks_cmd import add_tasks
    from fairque_cli.worker_cmd import add_worker

    queues: list[str] = []  # every --queue of this command line (one, but for worker)
    parser = _Parser(
        prog="fairque",
        description="fairque: a multi-tenant fair task queue on Redis/Valkey.",
        parents=[_common_options(defaults=True, queues=queues)],
        epilog="Environment: FAIRQUE_REDIS_URL, FAIRQUE_CONFIG, FAIRQUE_<SECTION>__<KEY> "
        "(e.g. FAIRQUE_QUEUE__LEASE_SECONDS=10), FAIRQUE_DEBUG=1 for tracebacks.",
    )
    parser.queues = queues
    parser.add_argument("--version", action="version", version=f"fairque {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    common = _common_options(defaults=False, queues=queues)
    for add in (add_demo, add_server, add_worker, add_push, add_stats, add_dlq):
        add(_WithParents(sub, common))
    add_dashboard(_WithParents(sub, common))
    add_operator_commands(_WithParents(sub, common))
    add_tasks(_WithParents(sub, common))
    add_limits(_WithParents(sub, common))
    add_pause(_WithParents(sub, common))
    add_events(_WithParents(sub, common))
    add_doctor(_WithParents(sub, common))
    add_exporter(_WithParents(sub, common))
    for add in (add_scheduler, add_schedule):
        add(_WithParents(sub, common))
    return parser


class _WithParents:
    """Adds the shared options to every subparser it creates (a ``SubCommands``)."""

    def __init__(
        self,
        sub: argparse._SubParsersAction[_Parser],
        parent: argparse.ArgumentParser,
    ) -> None:
        self._sub = sub
        self._parent = parent

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        kwargs.setdefault("parents", [self._parent])
        parser = self._sub.add_parser(name, **kwargs)
        parser.set_defaults(usage_prog=parser.prog)  # what a UsageError names (main)
        return parser


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= _MAX_MESSAGE else line[: _MAX_MESSAGE - 3] + "..."


def describe_error(exc: BaseException) -> str:
    """The one line a user sees for ``exc``."""
    from fairque_core.domain.errors import (
        ConfigurationError,
        RedisConnectionError,
        TaskNotFoundError,
        TaskValidationError,
    )

    text = str(exc) or type(exc).__name__
    if isinstance(exc, CliError):
        return text
    if "MOVED" in text and "cluster" not in text.lower():
        return f"{text} (the server is a cluster node: pass --cluster)"
    if isinstance(exc, ConfigurationError):
        where = f" ({exc.path})" if exc.path and exc.path not in text else ""
        return f"bad configuration{where}: {text}"
    if isinstance(exc, RedisConnectionError):
        return _connection_text(exc, text)
    if isinstance(exc, TaskValidationError):
        return text
    if isinstance(exc, TaskNotFoundError):
        return str(exc)
    module, cls = type(exc).__module__, type(exc).__name__
    if module.startswith("redis") and ("Connection" in cls or "Timeout" in cls):
        return f"cannot reach the server: {text}"
    if module.startswith("yaml"):
        return f"bad configuration: cannot parse YAML: {text}"
    if isinstance(exc, OSError):
        filename = f" {exc.filename}" if exc.filename else ""
        return f"{exc.strerror or text}{filename}"
    return f"{error_name(exc)}: {text}"


# The redis-py errors a RedisConnectionError wraps although the server answered: it refused
# the login, or cannot take commands now (loading, read-only replica, cluster down).
_ANSWERED = {
    "AuthenticationError": "the server refused the login (check the URL's user and password)",
    "AuthenticationWrongNumberOfArgsError": "the server refused the login",
    "AuthorizationError": "the server refused the login (check the URL's user and password)",
    "BusyLoadingError": "the server is loading its data set; try again shortly",
}


def _connection_text(exc: BaseException, text: str) -> str:
    """A RedisConnectionError's line: "cannot reach the server" only when the connection is
    the problem (refused, timed out, broken), not when the server answered with a refusal."""
    from fairque_core.domain.errors import OutcomeUnknownError

    cause: BaseException | None = exc
    while cause is not None:
        advice = _ANSWERED.get(type(cause).__name__)
        if advice is not None and type(cause).__module__.startswith("redis"):
            return f"{advice}: {text}"
        cause = cause.__cause__ or cause.__context__
    if isinstance(exc, OutcomeUnknownError) or "cannot take" in text:
        return text  # says itself what happened (a broken connection, a busy server)
    if type(exc).__module__.startswith("fairque_redis.servers"):
        return text  # the local server could not start: its message says why
    return f"cannot reach the server: {text}"


def _is_user_error(exc: BaseException) -> bool:
    from fairque_core.domain.errors import FairQueueError

    if isinstance(exc, (CliError, FairQueueError, OSError)):
        return True
    module = type(exc).__module__
    return module.startswith(("redis", "yaml", "cattrs"))


def main(argv: Sequence[str] | None = None, *, stdout: TextIO | None = None) -> int:
    """Run the ``fairque`` command; returns the exit status."""
    out = stdout if stdout is not None else sys.stdout
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args, out)
    except UsageError as exc:  # like argparse's: the command's name, exit 2
        prog = getattr(args, "usage_prog", None) or "fairque"
        sys.stderr.write(f"{prog}: error: {_one_line(str(exc))} (see: {prog} --help)\n")
        return EXIT_USAGE
    except KeyboardInterrupt:
        sys.stderr.write("fairque: interrupted\n")
        return EXIT_INTERRUPTED
    except Exception as exc:
        if os.environ.get("FAIRQUE_DEBUG"):
            traceback.print_exc()
        if not _is_user_error(exc):
            sys.stderr.write(
                f"fairque: internal error: {_one_line(describe_error(exc))} "
                "(set FAIRQUE_DEBUG=1 for the traceback)\n"
            )
            return EXIT_ERROR
        sys.stderr.write(f"fairque: error: {_one_line(describe_error(exc))}\n")
        return EXIT_ERROR
    return code


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
