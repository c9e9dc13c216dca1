"""Settings: the typed configuration values (attrs), their YAML/dict/env loading and URL masking.

Below the application and beside the ports, so adapters read their settings without importing
``app``."""
