"""Value types the backend protocols take (both faces import them from here)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeAlias

__all__ = ["FinishItem"]

#: One item of ``finish_batch``: ``(task_id, token, result)``, or with the task's XCom values
#: (key -> encoded value, or None) as a fourth element, and ``keep`` (``finish``'s, ADR 78)
#: as a fifth.
FinishItem: TypeAlias = (
    tuple[str, str, bytes | None]
    | tuple[str, str, bytes | None, Mapping[str, bytes]]
    | tuple[str, str, bytes | None, Mapping[str, bytes] | None, bool]
)
