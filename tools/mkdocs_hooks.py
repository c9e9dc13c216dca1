"""MkDocs hooks of the docs site (mkdocs.yml ``hooks``).

The pages of docs/ are also read on GitHub, where a link such as ``../src/fairque_core/x.py`` or
``../README.md`` opens that file. On the site those files do not exist, so before a page is
rendered each relative link that leaves docs/ is rewritten to the file's address in the
repository (``repo_url``/blob/main/...). Links between pages are left alone, so ``mkdocs build
--strict`` still fails on a broken one.
"""

from __future__ import annotations

import posixpath
import re
from typing import Any

_LINK = re.compile(r"(\]\()(\.\./[^)\s#]+)(#[^)\s]*)?(\))")


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    repo = str(config.get("repo_url") or "").rstrip("/")
    here = posixpath.dirname(page.file.src_uri)  # the page's folder inside docs/

    def rewrite(match: re.Match[str]) -> str:
        target = posixpath.normpath(posixpath.join("docs", here, match.group(2)))
        if target.startswith("docs/") or target.startswith(".."):
            return match.group(0)  # a page of the site (checked), or outside the repository
        anchor = match.group(3) or ""
        if match.group(2).endswith("/"):  # a folder: normpath dropped the slash
            target += "/"
        kind = "tree" if target.endswith("/") or "." not in posixpath.basename(target) else "blob"
        return f"{match.group(1)}{repo}/{kind}/main/{target}{anchor}{match.group(4)}"

    return _LINK.sub(rewrite, markdown)
