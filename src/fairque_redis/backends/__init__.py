"""The Redis backends of one slot: ``AsyncRedisBackend`` (the source) and ``RedisBackend``
(generated), their schedule stores, client options and error mapping."""
