"""Accelerators of the core below the application layer (ADR 65, docs/performance.md).

Nothing in the reference path imports this package.
"""
