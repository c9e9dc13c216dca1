"""Fuzz of the newer public calls (issue 34, item 2): limits, weights, pauses, purges,
schedules, workflows (Group / Chord / Chain), the intake, XCom reads, waits and listings.

The same two properties as ``test_public_api_fuzz.py``, on the reference model, Valkey 9 and
Redis 7:

* **typed**: only :class:`FairQueueError` escapes a call (a ``TypeError`` or ``ValueError``
  from deep inside, a bare ``KeyError``, an untyped script error: each fails the test);
* **stored right**: what a call accepted reads back as given: limits from
  ``get_tenant_limits``, weights from ``get_tenant_weights``, pauses from ``is_paused``,
  schedules from ``list_schedules``, a workflow's tasks from ``get_task`` (and a hand-built
  chord's callback waits for its members instead of running at once).

The budget follows the hypothesis profile, capped in the default run like the older fuzz.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fairque_core import (
    Chain,
    Chord,
    FairQueue,
    Group,
    Task,
    TaskState,
)
from fairque_core.domain.scoring import stride_for

from .test_public_api_fuzz import (
    BACKENDS,
    FUZZ,
    attempt,
    counts,
    fresh_ids,
    fuzz_queue,
    junk,
    maybe,
    odd_strings,
    payloads,
    wrong,
)

TENANTS = ["nz-a", "nz-b", "nz-c"]
tenants = st.sampled_from(TENANTS)
numbers = st.one_of(
    st.none(),
    st.integers(-3, 1000),
    st.floats(min_value=-1, max_value=1e6),
    st.sampled_from([0, 1, 2**31, 2**53, 10**20, float("nan"), float("inf"), 1e-12, True]),
    junk,
)
seconds = st.one_of(
    st.floats(min_value=0, max_value=0.05), st.sampled_from([-1.0, float("nan"), 1e300]), junk
)
crons = st.one_of(
    st.sampled_from(["* * * * *", "*/5 * * * *", "0 9 * * 1-5", "* * * * * *"]),
    st.sampled_from(["", "61 * * * *", "* * *", "@hourly", "0 0 31 2 *"]),
    odd_strings,
    junk,
)
templates = st.one_of(
    st.fixed_dictionaries({"tenant": tenants}, optional={"payload": payloads, "priority": junk}),
    st.dictionaries(st.text(max_size=8), junk, max_size=3),
    junk,
)


class NewerFuzzer:
    def __init__(self, queue: FairQueue) -> None:
        self.queue = queue

    def task(self, data: st.DataObject, tenant: Any = None) -> Task:
        return Task.create(
            tenant if tenant is not None else data.draw(tenants),
            task_id=data.draw(fresh_ids),
            payload={"n": data.draw(st.integers(0, 9))},
        )

    # ---- limits and weights

    def limits(self, data: st.DataObject) -> None:
        tenant = data.draw(maybe(tenants), label="tenant")
        given_ = {
            key: data.draw(numbers, label=key)
            for key in ("max_running", "rate", "burst", "max_queued")
            if data.draw(st.booleans(), label=f"give {key}")
        }
        ok, _ = attempt("set_tenant_limits", lambda: self.queue.set_tenant_limits(tenant, **given_))
        if not ok:
            return
        status = self.queue.get_tenant_limits(tenant)
        for key, value in given_.items():
            if value is None:
                continue
            got = getattr(status.own, key, None)
            if got is None or not math.isclose(float(got), float(value), rel_tol=1e-9):
                wrong("set_tenant_limits", f"{key}: read back {got!r}, set {value!r}")
        attempt("clear_tenant_limits", lambda: self.queue.clear_tenant_limits(tenant))

    def weights(self, data: st.DataObject) -> None:
        tenant = data.draw(maybe(tenants), label="tenant")
        weight = data.draw(numbers, label="weight")
        tier = data.draw(st.one_of(st.integers(-2, 5), junk), label="tier")
        ok, _ = attempt(
            "set_tenant_weight", lambda: self.queue.set_tenant_weight(tenant, weight, tier=tier)
        )
        if ok:  # a weight is stored as its stride: it reads back as the same stride
            got = self.queue.get_tenant_weights([tenant])[tenant]
            if stride_for(got[0]) != stride_for(weight) or got[1] != int(tier):
                wrong("set_tenant_weight", f"read back {got!r}, set {(weight, tier)!r}")
        attempt("get_tenant_weights", lambda: self.queue.get_tenant_weights(data.draw(junk)))

    # ---- pauses and purges

    def pauses(self, data: st.DataObject) -> None:
        tenant = data.draw(st.one_of(st.none(), maybe(tenants)), label="tenant")
        ok, _ = attempt("pause", lambda: self.queue.pause(tenant))
        if ok and not self.queue.is_paused(tenant):
            wrong("pause", f"{tenant!r} not paused after pause()")
        ok, _ = attempt("resume", lambda: self.queue.resume(tenant))
        if ok and self.queue.is_paused(tenant):
            wrong("resume", f"{tenant!r} still paused after resume()")

    def purges(self, data: st.DataObject) -> None:
        tenant = data.draw(maybe(tenants), label="tenant")
        ok, purged = attempt("purge_tenant", lambda: self.queue.purge_tenant(tenant))
        if ok and (not isinstance(purged, int) or purged < 0):
            wrong("purge_tenant", f"returned {purged!r}")

    # ---- schedules

    def schedules(self, data: st.DataObject) -> None:
        name = data.draw(st.one_of(st.sampled_from(["s1", "s2"]), odd_strings, junk))
        cron = data.draw(crons, label="cron")
        template = data.draw(templates, label="template")
        options: dict[str, Any] = {}
        if data.draw(st.booleans(), label="give timezone"):
            options["timezone"] = data.draw(
                st.one_of(st.sampled_from(["UTC", "Europe/Paris", "Nowhere/City"]), junk)
            )
        if data.draw(st.booleans(), label="give misfire"):
            options["misfire"] = data.draw(
                st.one_of(st.sampled_from(["skip", "catch_up", "run_once", "bogus"]), junk)
            )
        if data.draw(st.booleans(), label="give jitter"):
            options["jitter"] = data.draw(numbers)
        ok, schedule = attempt(
            "add_schedule", lambda: self.queue.add_schedule(name, cron, template, **options)
        )
        if ok:
            found = {info.schedule.name: info.schedule for info in self.queue.list_schedules()}
            stored = found.get(name)
            if stored is None or stored.cron != schedule.cron:
                wrong("add_schedule", f"{name!r} reads back as {stored!r}, added {schedule!r}")
            attempt("remove_schedule", lambda: self.queue.remove_schedule(name))

    # ---- workflows

    def workflows(self, data: st.DataObject) -> None:
        tenant = data.draw(tenants)
        members = [self.task(data, tenant) for _ in range(data.draw(st.integers(0, 3)))]
        odd = data.draw(st.one_of(st.just(members), junk, st.lists(junk, max_size=2)))
        kind = data.draw(st.sampled_from(["group", "chord", "chain"]))
        if kind == "group":
            ok, group = attempt("Group", lambda: Group(odd))
            if ok:
                ok, handles = attempt("push_group", lambda: self.queue.push_group(group))
                if ok:
                    self._stored("push_group", [h.task_id for h in handles])
        elif kind == "chord":
            callback = data.draw(st.one_of(st.just(self.task(data, tenant)), junk))
            ok, chord = attempt("Chord", lambda: Chord(Group(odd), callback))
            if ok:
                ok, handle = attempt("push_chord", lambda: self.queue.push_chord(chord))
                if ok:
                    state = self.queue.get_state(handle.task_id)
                    if members and state not in (TaskState.DEFERRED, None):
                        wrong("push_chord", f"the callback is {state} before its members ran")
        else:
            ok, chain = attempt("Chain", lambda: Chain(odd))
            if ok:
                ok, handle = attempt("push_chain", lambda: self.queue.push_chain(chain))
                if ok:
                    self._stored("push_chain", [handle.task_id])

    def _stored(self, where: str, task_ids: list[str]) -> None:
        for task_id in task_ids:
            if self.queue.get_task(task_id) is None:
                wrong(where, f"{task_id!r} accepted but not stored")

    # ---- the intake, XCom, waits and listings

    def intake(self, data: st.DataObject) -> None:
        ok, handle = attempt("push_intake", lambda: self.queue.push_intake(self.task(data)))
        limit = data.draw(st.one_of(st.integers(1, 50), counts, junk), label="limit")
        attempt("ingest", lambda: self.queue.ingest(limit))
        if ok and self.queue.intake_size() == 0 and self.queue.get_task(handle.task_id) is None:
            wrong("push_intake", f"{handle.task_id!r} acknowledged, then not stored")

    def reads(self, data: st.DataObject) -> None:
        tenant = data.draw(maybe(tenants))
        key = data.draw(st.one_of(st.just("return_value"), odd_strings, junk))
        task_id = data.draw(st.one_of(fresh_ids, odd_strings, junk))
        attempt("xcom_pull", lambda: self.queue.xcom_pull(task_id, key, tenant=tenant))
        items = data.draw(st.one_of(st.lists(st.tuples(fresh_ids, st.just("k"))), junk))
        attempt("xcom_get_values", lambda: self.queue.xcom_get_values(tenant, items))
        timeout = data.draw(seconds)
        attempt("wait_result", lambda: self.queue.wait_result(task_id, timeout))
        limit, offset = data.draw(counts), data.draw(counts)
        attempt("list_tenants", lambda: self.queue.list_tenants(limit=limit, offset=offset))
        attempt(
            "get_tenant_fairness",
            lambda: self.queue.get_tenant_fairness(
                data.draw(st.one_of(st.none(), maybe(tenants), junk)), limit=limit
            ),
        )
        attempt("list_dlq", lambda: self.queue.list_dlq(limit=limit, offset=offset))
        ids = data.draw(st.one_of(st.none(), st.lists(odd_strings, max_size=2), junk))
        attempt("requeue_dlq", lambda: self.queue.requeue_dlq(ids))
        attempt("claim_when_ready", lambda: self._claim_when_ready(data))

    def _claim_when_ready(self, data: st.DataObject) -> None:
        count = data.draw(st.one_of(st.integers(1, 3), counts, junk))
        tasks = self.queue.claim_when_ready(count, timeout=data.draw(seconds))
        for task in tasks:
            self.queue.release(task)

    def batcher(self, data: st.DataObject) -> None:
        size, delay = data.draw(counts), data.draw(numbers)
        ok, batcher = attempt(
            "batcher", lambda: self.queue.batcher(max_size=size, max_delay_ms=delay)
        )
        if ok:
            with batcher:
                pass


STEPS = {
    name: getattr(NewerFuzzer, name)
    for name in (
        "limits",
        "weights",
        "pauses",
        "purges",
        "schedules",
        "workflows",
        "intake",
        "reads",
        "batcher",
    )
}


@pytest.fixture(scope="module", params=BACKENDS)
def fuzzer(request: pytest.FixtureRequest) -> Iterator[NewerFuzzer]:
    with fuzz_queue(request, "nfuzz-") as queue:
        yield NewerFuzzer(queue)


@FUZZ
@given(step=st.sampled_from(sorted(STEPS)), data=st.data())
def test_newer_calls_only_typed_errors_and_exact_storage(
    fuzzer: NewerFuzzer, step: str, data: st.DataObject
) -> None:
    STEPS[step](fuzzer, data)
