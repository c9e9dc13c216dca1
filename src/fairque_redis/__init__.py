"""fairque Redis/Valkey adapter."""
