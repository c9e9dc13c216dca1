"""The cron scheduler: ``AsyncScheduler`` (the source) and ``Scheduler`` (generated)."""
