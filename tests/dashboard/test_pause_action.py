"""The tenants page's pause/resume action (POST /tenants/<id>/pause and /resume): token-gated
like the other actions, a paused badge on the tenants page, claims skip the paused tenant."""

from __future__ import annotations

import re

from .conftest import TOKEN, Env


def _badge(html: str, tenant: str) -> bool:
    row = re.search(rf'<tr data-tenant="{tenant}">(.*?)</tr>', html, re.S)
    assert row is not None, tenant
    return 'class="badge paused"' in row.group(1)


def test_pause_and_resume_a_tenant(seeded: Env) -> None:
    queue = seeded.queue
    with seeded.client(token=TOKEN) as client:
        page = client.get("/tenants").text
        assert not _badge(page, "alice")
        assert 'action="/tenants/alice/pause"' in page
        done = client.post("/tenants/alice/pause", data={"token": TOKEN})
        assert done.status_code == 200
        assert "tenant paused" in done.text
        assert _badge(done.text, "alice")
        assert 'action="/tenants/alice/resume"' in done.text
        assert queue.is_paused("alice")
        claimed = [queue.claim() for _ in range(5)]
        assert "alice" not in {t.tenant for t in claimed if t is not None}
        done = client.post("/tenants/alice/resume", data={"token": TOKEN})
        assert done.status_code == 200
        assert "tenant resumed" in done.text
        assert not _badge(done.text, "alice")
        assert not queue.is_paused("alice")
        task = queue.claim()
        assert task is not None
        assert task.tenant == "alice"


def test_pause_needs_the_token(seeded: Env) -> None:
    with seeded.client(token=TOKEN) as client:
        for data in ({}, {"token": "wrong"}):
            refused = client.post("/tenants/alice/pause", data=data)
            assert refused.status_code == 403
            assert "token" in refused.text
        cross = client.post(
            "/tenants/alice/pause", data={"token": TOKEN}, headers={"Origin": "http://evil.example"}
        )
        assert cross.status_code == 403
    assert not seeded.queue.is_paused("alice")
    with seeded.client(token=None) as client:
        page = client.get("/tenants").text
        assert 'action="/tenants/alice/pause"' not in page
        assert client.post("/tenants/alice/pause", data={"token": ""}).status_code == 403
    assert not seeded.queue.is_paused("alice")


def test_bad_tenant_id_is_a_400(seeded: Env) -> None:
    with seeded.client(token=TOKEN) as client:
        bad = client.post("/tenants/a%20b/pause", data={"token": TOKEN})
        assert bad.status_code == 400
        assert "Traceback" not in bad.text
