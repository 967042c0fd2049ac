"""MkDocs hook for the qgraph docs (built-in hooks mechanism, no plugin package).

The docs mark code blocks that must not be run by tests/test_docs.py with the fence info
string ``python no-run``, and those it runs only where PyTorch is installed with ``python torch``.
Python-Markdown's fenced_code accepts only one word after the fence, so this hook reduces such
fences to ``python`` before the page is rendered.
"""

from __future__ import annotations

import re

_NO_RUN_FENCE = re.compile(r"^([ \t]*(?:`{3,}|~{3,}))[ \t]*python[ \t]+(?:no-run|torch)[ \t]*$", re.MULTILINE)


def on_page_markdown(markdown: str, **kwargs) -> str:
    return _NO_RUN_FENCE.sub(r"\1python", markdown)
