"""Chaos tests: a fault-injecting proxy, a history checker and structural invariants."""
