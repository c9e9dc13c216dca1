"""Plain terminal output: aligned tables, a live redraw on a TTY, periodic lines elsewhere.

No third-party dependency: a table is a list of rows of strings, and the live view redraws
itself with two ANSI sequences (cursor up N lines, clear to the end of the screen).
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Sequence
from typing import TextIO

__all__ = ["LiveView", "bold", "format_table", "use_color"]

_CURSOR_UP = "\x1b[{n}F"
_CLEAR_DOWN = "\x1b[J"


def use_color(stream: TextIO) -> bool:
    """True when ``stream`` is a terminal and ``NO_COLOR`` is not set."""
    if os.environ.get("NO_COLOR"):
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def bold(text: str, enabled: bool) -> str:
    return f"\x1b[1m{text}\x1b[0m" if enabled else text


def color(text: str, code: str, enabled: bool) -> str:
    """``text`` in an SGR colour (``"32"`` green, ``"31"`` red, ``"33"`` yellow)."""
    return f"\x1b[{code}m{text}\x1b[0m" if enabled else text


def format_table(
    header: Sequence[str], rows: Sequence[Sequence[str]], *, right: Sequence[int] = ()
) -> list[str]:
    """Rows of cells as aligned text lines; columns listed in ``right`` are right-aligned."""
    widths = [len(h) for h in header]
    for row in rows:
        for index, cell in enumerate(row):
            widths[index] = max(widths[index], len(cell))
    aligned = set(right)

    def line(cells: Sequence[str]) -> str:
        parts = []
        for index, cell in enumerate(cells):
            width = widths[index]
            parts.append(cell.rjust(width) if index in aligned else cell.ljust(width))
        return "  ".join(parts).rstrip()

    out = [line(header), "  ".join("-" * w for w in widths)]
    out.extend(line(row) for row in rows)
    return out


class LiveView:
    """A block of lines that is redrawn in place on a TTY and printed every ``period`` otherwise.

    ``update(lines)`` may be called often: on a terminal the block is replaced at most every
    ``tty_period`` seconds; elsewhere (a pipe, a log file) the block is printed at most every
    ``period`` seconds so logs stay readable. ``finish(lines)`` always prints the final block.
    """

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        period: float = 2.0,
        tty_period: float = 0.25,
        tty: bool | None = None,
    ) -> None:
        self._stream = stream if stream is not None else sys.stdout
        self._tty = use_color(self._stream) if tty is None else tty
        self._period = tty_period if self._tty else period
        self._shown = 0
        self._last = 0.0

    @property
    def tty(self) -> bool:
        return self._tty

    def due(self) -> bool:
        """True when the next ``update`` would be shown (so callers can skip building it)."""
        return not self._last or time.monotonic() - self._last >= self._period

    def update(self, lines: Sequence[str], *, force: bool = False) -> bool:
        """Show ``lines`` if the period has passed (or ``force``); True when shown."""
        now = time.monotonic()
        if not force and self._last and now - self._last < self._period:
            return False
        self._last = now
        self._write(lines)
        return True

    def finish(self, lines: Sequence[str]) -> None:
        """Show the final block and stop redrawing over it."""
        self._write(lines)
        self._shown = 0

    def _write(self, lines: Sequence[str]) -> None:
        if self._tty:  # a wrapped line would break the cursor arithmetic of the redraw
            width = shutil.get_terminal_size().columns
            lines = [line if len(line) <= width else line[: max(1, width - 1)] for line in lines]
        text = "\n".join(lines) + "\n"
        if self._tty:
            if self._shown:
                text = _CURSOR_UP.format(n=self._shown) + _CLEAR_DOWN + text
            self._shown = len(lines)
        else:
            text += "\n"
        self._stream.write(text)
        self._stream.flush()
