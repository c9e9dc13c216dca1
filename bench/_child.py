"""One measurement in a child Python, one build's ``src`` first on its path (shared by the
benches that run two builds side by side: bench_worker.py, bench_latency_path.py,
bench_client_cost.py).

The child prints what it measured as a JSON object on its last line of output; anything
before it (progress, warnings) is ignored. A child that fails raises, with its stderr's tail.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import Any


def run_child(
    args: Sequence[str], src: str | None = None, env: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Run ``python *args``, with ``src`` as PYTHONPATH (None: this environment's own build)
    and ``env`` added to the environment; returns the JSON object on its last output line."""
    child_env = dict(os.environ)
    if src is not None:
        child_env["PYTHONPATH"] = str(src)
    child_env.update(env or {})
    out = subprocess.run(
        [sys.executable, *args], env=child_env, capture_output=True, text=True, check=False
    )
    lines = out.stdout.strip().splitlines()
    if out.returncode != 0 or not lines:
        raise RuntimeError(
            f"child {list(args)[:2]} failed ({out.returncode}):\n{out.stderr[-2000:]}"
        )
    result: dict[str, Any] = json.loads(lines[-1])
    return result
