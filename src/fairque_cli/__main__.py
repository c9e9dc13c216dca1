"""``python -m fairque_cli``: the same as the ``fairque`` console script."""

from __future__ import annotations

from fairque_cli.main import main

raise SystemExit(main())
