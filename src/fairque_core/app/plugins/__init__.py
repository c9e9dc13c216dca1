"""The plugin host: pluggy behind a typed facade, and the built-in plugins (JSON codec, default
retry, executor)."""
