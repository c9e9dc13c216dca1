"""Value types the backend protocols take (both faces import them from here)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeAlias

__all__ = ["FinishItem"]

#: One item of ``finish_batch``: ``(task_id, token, result)``, or with the task's XCom values
#: (key -> encoded value) as a fourth element.
FinishItem: TypeAlias = (
    tuple[str, str, bytes | None] | tuple[str, str, bytes | None, Mapping[str, bytes]]
)
