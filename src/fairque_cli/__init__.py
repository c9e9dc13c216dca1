"""fairque command line (composition root): ``fairque demo|worker|push|stats|dlq``."""

from __future__ import annotations

from importlib import metadata

__all__ = ["__version__"]

try:
    __version__ = metadata.version("fairque")
except metadata.PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0+unknown"
