"""Workers: the no-I/O loop (``loop``), its step classes, the thread and asyncio drivers, handlers
and the task context's signals."""
