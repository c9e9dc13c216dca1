"""``fairque doctor``: the invariants of a queue's keys, their findings and the repairs."""
