"""Servers this package starts or checks: the embedded Valkey, the shared local server, the test
cluster, the server-setting checks."""
