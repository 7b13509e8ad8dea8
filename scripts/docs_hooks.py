"""MkDocs hooks for the documentation site (mkdocs.yml names this file).

The docstrings cross-reference in Sphinx's roles (``:func:`name```, ``:class:`~a.b.C```),
which Markdown renders as the role's text before a code span; the site shows the code span
alone, and a ``~``-prefixed path as its last name, as Sphinx does.
"""

from __future__ import annotations

import re

SPHINX_ROLE = re.compile(r":(?:func|class|mod|meth|attr|data|obj|exc):<code>(~(?:[\w.]+\.)?)?")


def on_page_content(html: str, **_: object) -> str:
    return SPHINX_ROLE.sub("<code>", html)
