"""A Griffe extension for the API pages (mkdocs.yml loads it): our docstrings read as Markdown.

They are written for ``help()`` and doctest, not for a Markdown renderer: Sphinx roles
(``:func:`~grpo.algo.kl.kl_penalty```) become code spans (the last name for a ``~`` path),
each run of doctest lines becomes a fenced ``pycon`` block at the indentation of the text
it belongs to (an indented run would otherwise be joined into a paragraph), and a prose
line that starts with ``#`` (a count such as ``#{A < 0} / #kept``) is escaped, not a heading.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:func|class|mod|meth|attr|data|obj|exc):`(~?)([^`]+)`")


def _role(match: re.Match[str]) -> str:
    path = match.group(2)
    return f"`{path.rsplit('.', 1)[-1] if match.group(1) else path}`"


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def markdown_docstring(text: str) -> str:
    """``text`` with its roles, doctest runs and ``#`` lines made Markdown-safe."""
    lines = ROLE.sub(_role, text).splitlines()
    out: list[str] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        if not line.lstrip().startswith(">>>"):
            out.append("\\" + line.lstrip() if line.lstrip().startswith("#") else line)
            index += 1
            continue
        own = _indent(line)
        above = next((_indent(prev) for prev in reversed(out) if prev.strip()), own)
        indent = min(own, above)
        run = []
        while index < len(lines) and lines[index].strip() and _indent(lines[index]) >= own:
            run.append(" " * indent + lines[index][own:])
            index += 1
        if out and out[-1].strip():
            out.append("")
        out += [" " * indent + "```pycon", *run, " " * indent + "```", ""]
    return "\n".join(out)


class DocstringMarkdown(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown_docstring(obj.docstring.value)
