"""Partitioned queues: one queue over P slots (ADR 34), the partition picker and the
cross-partition reads."""
