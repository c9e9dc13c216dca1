"""Test your own fairness: run your weights and worker layout, measure, assert.

Shipped with fairque. The pieces:

* a pytest plugin (loaded automatically through the ``pytest11`` entry point) with the fixtures
  ``fairque_server``, ``fairque_queue``, ``fairque_memory_queue``, ``fairque_make_queue`` and
  ``fairque_clock``, and the option ``--fairque-url`` (or ``$FAIRQUE_TEST_URL``) to run the same
  tests against your own Redis/Valkey or cluster (``--fairque-cluster``);
* :func:`simulate`: push a :class:`Load` through a real queue with your worker layout and
  record the dispatch order;
* :func:`fairness_report` and :func:`assert_fair`: Jain index, share against weight, lag and
  newcomer wait, and a readable failure message;
* :func:`outcome_report` and :func:`assert_outcomes_fair`: completed, failed and retried work
  per tenant and per tier (``simulate(..., handler=...)`` runs your handler), so a tier whose
  tasks fail is caught even when its claims came in its turn;
* :mod:`fairque_testing.strategies`: hypothesis strategies for tenants, weights, tiers and loads
  (needs ``hypothesis``, which ``pip install "fairque[testing]"`` brings; imported only there).

See ``docs/testing-fairness.md`` for a worked example.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fairque_testing.load import Arrival, Load
    from fairque_testing.outcomes import (
        DEFAULT_MIN_SETTLED,
        OutcomeReport,
        Outcomes,
        assert_outcomes_fair,
        outcome_report,
    )
    from fairque_testing.queues import (
        FairqueServer,
        FakeClock,
        clock_of,
        drop_queue,
        make_queue,
        new_queue_name,
    )
    from fairque_testing.report import (
        DEFAULT_MIN_OWED,
        Dispatched,
        FairnessReport,
        Held,
        Ready,
        TenantFairness,
        TraceEvent,
        Unheld,
        assert_fair,
        fairness_report,
    )
    from fairque_testing.simulation import (
        COMPLETED,
        DEAD,
        RETRIED,
        DispatchRecord,
        Simulation,
        WorkerSpec,
        simulate,
    )

# Names are imported on first use, so the pytest plugin (a submodule) loads without importing
# fairque itself: the library under test is imported by the tests, not by pytest's start-up.
_HOME = {
    "Arrival": "load",
    "Load": "load",
    "DEFAULT_MIN_SETTLED": "outcomes",
    "OutcomeReport": "outcomes",
    "Outcomes": "outcomes",
    "assert_outcomes_fair": "outcomes",
    "outcome_report": "outcomes",
    "FairqueServer": "queues",
    "FakeClock": "queues",
    "clock_of": "queues",
    "drop_queue": "queues",
    "make_queue": "queues",
    "new_queue_name": "queues",
    "DEFAULT_MIN_OWED": "report",
    "Dispatched": "report",
    "FairnessReport": "report",
    "Held": "report",
    "Ready": "report",
    "TenantFairness": "report",
    "TraceEvent": "report",
    "Unheld": "report",
    "assert_fair": "report",
    "fairness_report": "report",
    "COMPLETED": "simulation",
    "DEAD": "simulation",
    "RETRIED": "simulation",
    "DispatchRecord": "simulation",
    "Simulation": "simulation",
    "WorkerSpec": "simulation",
    "simulate": "simulation",
}

__all__ = [
    "COMPLETED",
    "DEAD",
    "DEFAULT_MIN_OWED",
    "DEFAULT_MIN_SETTLED",
    "RETRIED",
    "Arrival",
    "DispatchRecord",
    "Dispatched",
    "FairnessReport",
    "FairqueServer",
    "FakeClock",
    "Held",
    "Load",
    "OutcomeReport",
    "Outcomes",
    "Ready",
    "Simulation",
    "TenantFairness",
    "TraceEvent",
    "Unheld",
    "WorkerSpec",
    "assert_fair",
    "assert_outcomes_fair",
    "clock_of",
    "drop_queue",
    "fairness_report",
    "make_queue",
    "new_queue_name",
    "outcome_report",
    "simulate",
]


def __getattr__(name: str) -> Any:
    if name == "strategies":  # the submodule, as ``fairque_testing.strategies`` after an import
        return importlib.import_module("fairque_testing.strategies")
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'fairque_testing' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"fairque_testing.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
