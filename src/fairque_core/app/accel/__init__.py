"""Accelerators of the application layer: performance-only second paths, fenced (ADR 65,
docs/performance.md).

Nothing in the reference path imports this package; composition roots plug its pieces in."""
