"""Durability modes (ADR 33): what an acknowledgement waits for, and the replica waiters."""
