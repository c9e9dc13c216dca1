"""Script calls for the Redis backends: build each Lua script's ARGV and parse its reply.

Both faces (:class:`~fairque_redis.backends.backend.RedisBackend` and
:class:`~fairque_redis.backends.backend_async.AsyncRedisBackend`) do "build the call -> one script
call -> parse the reply"; everything except the call itself lives in this package, with no
I/O. Validation happens while building, so a bad id or an oversized payload is refused before
any command is sent. One module per concept:

- :mod:`.base`: the :class:`Call` value, reply checks, the ARGV header, lease tokens
- :mod:`.records`: the stored task record (meta JSON) and reading or salvaging it
- :mod:`.tasks`: push, claim, cancel
- :mod:`.leases`: heartbeat, finish, fail, release, requeue of expired leases
- :mod:`.dlq`: list, requeue and purge the dead-letter queue
- :mod:`.tenants`: weights and tiers, tenant statistics, the tenant list
- :mod:`.operator`: purge waiting work, read tenants' weights and tiers
- :mod:`.figures`: the tenants' fairness figures
- :mod:`.limits`: flow control: change limits, read a tenant's standing against them
- :mod:`.pause`: pause and resume a tenant or the queue
- :mod:`.inspection`: reads of one task, queue sizes and statistics, the next due time
"""

from __future__ import annotations

from fairque_redis.scripting.calls.base import Call
from fairque_redis.scripting.calls.browse import BrowseCalls
from fairque_redis.scripting.calls.dlq import DlqCalls
from fairque_redis.scripting.calls.figures import FigureCalls
from fairque_redis.scripting.calls.inspection import InspectionCalls
from fairque_redis.scripting.calls.leases import LeaseCalls
from fairque_redis.scripting.calls.limits import LimitCalls
from fairque_redis.scripting.calls.operator import OperatorCalls
from fairque_redis.scripting.calls.pause import PauseCalls
from fairque_redis.scripting.calls.records import decode_message, read_message, salvage_message
from fairque_redis.scripting.calls.tasks import TaskCalls
from fairque_redis.scripting.calls.tenants import TenantCalls

__all__ = ["Call", "ScriptCalls", "decode_message", "read_message", "salvage_message"]


class ScriptCalls(
    TaskCalls,
    LeaseCalls,
    DlqCalls,
    TenantCalls,
    InspectionCalls,
    OperatorCalls,
    FigureCalls,
    LimitCalls,
    PauseCalls,
    BrowseCalls,
):
    """Every script call of one queue, for one backend instance (holds its clock and tokens)."""
