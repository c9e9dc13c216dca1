"""A running task's progress (issue 32 item 2; ``set_progress`` of the port) on every backend:
kept on its record while the lease is live, each value told as a ``progress`` event in
order, refused (nothing changed) once the lease is gone or with another token."""

from __future__ import annotations

from .helpers import msg


def _progress_events(backend):
    out, after = [], "0"
    while True:
        got = backend.read_events(after, count=50)
        if not got:
            return [e.progress for e in out if e.type == "progress"]
        out.extend(got)
        after = got[-1].id


def test_progress_is_kept_and_told_in_order(backend):
    backend.push(msg("p1", tenant="acme"))
    [claimed] = backend.claim(count=1)
    token = claimed.lease.token
    for n in range(10):
        assert backend.set_progress("acme", "p1", token, f'{{"step":{n}}}'.encode())
    assert backend.get_record("p1").progress == b'{"step":9}'
    assert _progress_events(backend) == [{"step": n} for n in range(10)]
    backend.finish("p1", token, b'"ok"')
    assert backend.get_record("p1").progress == b'{"step":9}'  # kept with the story


def test_progress_needs_the_live_lease(backend):
    backend.push(msg("p2", tenant="acme"))
    [claimed] = backend.claim(count=1)
    assert not backend.set_progress("acme", "p2", "not-the-token", b"1")
    assert backend.get_record("p2").progress is None
    backend.finish("p2", claimed.lease.token, None)
    assert not backend.set_progress("acme", "p2", claimed.lease.token, b"2")
    assert backend.get_record("p2").progress is None
    assert _progress_events(backend) == []
    assert not backend.set_progress("acme", "never-pushed", "t", b"3")
