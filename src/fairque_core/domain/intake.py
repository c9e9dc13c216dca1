"""The intake's domain names (ADR 47), shared by every backend and the engine: what one ingest
did, how much a claim ingests, and which messages the intake takes.

The intake is a producer's append-only path: ``push_intake`` stores a message durably in one
cheap write and the backend checks, numbers and places it later, when it ingests (at the start
of every claim, and on ``ingest``). The port's optional capability is ``TakesIntake``
(:mod:`fairque_core.ports`); the reference model's is ``fairque_core/memory/intake.py``.
"""

from __future__ import annotations

import attrs

from fairque_core.domain.errors import TaskValidationError
from fairque_core.domain.models import Message
from fairque_core.domain.validation import check_count

__all__ = ["INTAKE_CLAIM_LIMIT", "IngestReport", "check_ingest_limit", "check_intake_message"]


@attrs.frozen(kw_only=True)
class IngestReport:
    """What one ingest of a queue's intake did (ADR 47), message by message in intake order.

    ``ingested``: stored as a push of that message at that moment would store it (numbered,
    scored and placed by the backend's clock then). ``duplicates``: a live task already had the
    id (nothing stored; counted in ``duplicates`` as a duplicate push is). ``rejected``: refused
    (its tenant at ``max_queued``, a payload over the limit, a malformed entry) and moved to the
    dead-letter queue as :attr:`FailureType.REJECTED <fairque_core.domain.enums.FailureType>`,
    with the reason; never dropped. ``left``: entries still in the intake after this ingest.
    """

    ingested: int = 0
    duplicates: int = 0
    rejected: int = 0
    left: int = 0

    def __add__(self, other: IngestReport) -> IngestReport:
        """Both reports' counts added, ``left`` too (two partitions' intakes); an ingest made
        of several calls on one intake takes the last call's ``left`` instead."""
        return IngestReport(
            ingested=self.ingested + other.ingested,
            duplicates=self.duplicates + other.duplicates,
            rejected=self.rejected + other.rejected,
            left=self.left + other.left,
        )

    @property
    def done(self) -> int:
        """Entries this ingest took from the intake: ingested, duplicates and rejected."""
        return self.ingested + self.duplicates + self.rejected


#: The most intake entries one claim (or finish-and-claim) ingests before it picks (ADR 47):
#: bounds the server time a claim spends on a producer's backlog; ``ingest()`` takes its own.
INTAKE_CLAIM_LIMIT = 256


def check_intake_message(message: Message) -> None:
    """Refuse, before any I/O, a message the intake cannot take (ADR 47): only a plain one is
    taken, ready at once (``delay <= 0``), without ``depends_on`` and without a
    ``unique_key``; those need their checks answered at push time, so they go through
    ``push``. Raises :class:`TaskValidationError` naming the field."""
    if message.delay > 0:
        raise TaskValidationError("delay", message.delay, "the intake takes only tasks ready now")
    if message.depends_on:
        raise TaskValidationError(
            "depends_on", message.depends_on, "the intake takes no tasks with dependencies"
        )
    if message.unique_key:
        raise TaskValidationError(
            "unique_key", message.unique_key, "the intake takes no tasks with a unique key"
        )


def check_ingest_limit(limit: object) -> int:
    """``ingest``'s ``limit``: an int >= 1 (TaskValidationError before any I/O)."""
    return check_count(limit, "limit", 1)
