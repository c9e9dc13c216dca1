"""Accelerators of the Redis adapter, fenced (ADR 65, docs/performance.md): the intake client."""
