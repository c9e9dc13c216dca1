"""Lease tokens of the default source (issue 17, ADR 55): cut from a block of the OS's CSPRNG
read a few KB at a time, per backend instance; 32 lowercase hex digits (128 bits), never
repeated, across threads and across a fork."""

from __future__ import annotations

import os
import re
import sys
import threading

import pytest

from fairque_core.ports import random_token
from fairque_core.settings.config import QueueConfig
from fairque_redis.keys import KeySpace
from fairque_redis.scripting.calls import ScriptCalls
from fairque_redis.scripting.calls import base as calls_base

_TOKEN = re.compile(r"[0-9a-f]{32}")


def _calls() -> ScriptCalls:
    return ScriptCalls(KeySpace("tokens"), QueueConfig(), None, random_token)


def test_tokens_keep_their_format_and_come_from_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[int] = []
    real = calls_base.secrets.token_hex

    def counted(nbytes: int) -> str:
        reads.append(nbytes)
        return real(nbytes)

    monkeypatch.setattr(calls_base.secrets, "token_hex", counted)
    calls = _calls()
    drawn = [token for _ in range(600) for token in calls._draw_tokens(1)]
    assert all(type(t) is str and _TOKEN.fullmatch(t) for t in drawn)
    assert len(set(drawn)) == 600
    # 600 single-token claims: a few block reads (256 tokens each), not one read per claim
    assert 1 <= len(reads) <= 3
    assert all(n >= 4096 for n in reads)
    # a batch larger than a block is read whole
    big = calls._draw_tokens(1000)
    assert len(big) == len(set(big)) == 1000
    assert not set(big) & set(drawn)
    assert all(_TOKEN.fullmatch(t) for t in big)


def test_tokens_never_repeat_across_threads() -> None:
    calls = _calls()
    results: list[list[str]] = [[] for _ in range(8)]
    start = threading.Barrier(8)

    def draw(slot: int) -> None:
        start.wait()
        for k in range(400):
            results[slot] += calls._draw_tokens(1 + k % 7)
            if k % 5 == 0:  # a short claim gives its unused tokens back
                got = calls._draw_tokens(3)
                calls._give_back(got[1:])
                results[slot].append(got[0])

    threads = [threading.Thread(target=draw, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    flat = [t for part in results for t in part]
    assert len(flat) > 8 * 400
    assert len(set(flat)) == len(flat)
    assert all(_TOKEN.fullmatch(t) for t in flat)


def test_instances_do_not_share_tokens() -> None:
    one, two = _calls(), _calls()
    a = one._draw_tokens(100)
    b = two._draw_tokens(100)
    assert not set(a) & set(b)


@pytest.mark.skipif(not hasattr(os, "fork") or sys.platform == "darwin", reason="needs fork")
def test_a_forked_child_does_not_reuse_the_parents_buffer() -> None:
    calls = _calls()
    calls._draw_tokens(1)  # the block is read: 255 tokens wait in the buffer
    calls._give_back(calls._draw_tokens(2))  # and two spare ones
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.close(read)
            os.write(write, " ".join(calls._draw_tokens(300)).encode())
        finally:
            os._exit(0)
    os.close(write)
    chunks = []
    while chunk := os.read(read, 65536):
        chunks.append(chunk)
    os.close(read)
    os.waitpid(pid, 0)
    child = b"".join(chunks).decode().split()
    parent = calls._draw_tokens(300)
    assert len(child) == 300
    assert all(_TOKEN.fullmatch(t) for t in child)
    assert not set(child) & set(parent)
