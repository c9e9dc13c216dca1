"""fairque plugins: codecs, OpenTelemetry tracing and metrics, DLQ policies."""
