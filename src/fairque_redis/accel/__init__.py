"""Accelerators of the Redis adapter, fenced (ADR 65, docs/performance.md): the intake client
(``intake.py``) and what a composition root plugs into a backend (``compose.py``). The
backends never import this package. The adapter's other accelerators are the function library
(``scripting/function_library.py``, switch ``functions``) and ``lua/_include/fast/`` (switch
``claim_view``), which a backend selects when it is built."""
