"""The generated documentation: the configuration reference and the metrics glossary.

Each config field's documentation is its comment: the ``# …`` lines directly above it and
the ``# …`` at the end of its line, in ``grpo/config/sections.py``. Each metric's is its
entry in :data:`grpo.log.metric_glossary.MEANINGS`, for the keys of
:data:`grpo.log.metric_table.METRICS`. ``grpo docs`` prints the configuration reference;
``grpo docs --write docs`` refreshes every generated block of the docs pages (the text
between a page's ``<!-- BEGIN GENERATED … -->`` and ``<!-- END GENERATED … -->`` markers),
and a test fails while a page's copy is out of date.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import io
import json
import re
import textwrap
import tokenize
import typing
from pathlib import Path
from typing import Any, Literal

from grpo.config import Config
from grpo.config.sections import field_bounds
from grpo.log.metric_glossary import MEANINGS
from grpo.log.metric_table import METRICS, metric

REGENERATE = "grpo docs --write docs"


def field_docs(cls: type) -> dict[str, str]:
    """Field name → its comment (the lines right above it, then the one at its end)."""
    source = textwrap.dedent(inspect.getsource(cls))
    lines = source.splitlines()
    comments = {
        token.start[0]: token.string.lstrip("#").strip()
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT
    }
    class_node = ast.parse(source).body[0]
    assert isinstance(class_node, ast.ClassDef)
    docs = {}
    for node in class_node.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        above: list[str] = []
        number = node.lineno - 1
        while number >= 1 and lines[number - 1].lstrip().startswith("#"):
            above.insert(0, comments[number])
            number -= 1
        end = node.end_lineno or node.lineno
        trailing = [comments[n] for n in range(node.lineno, end + 1) if n in comments]
        docs[node.target.id] = " ".join(above + trailing)
    return docs


def _type_name(hint: Any) -> str:
    origin = typing.get_origin(hint)
    if origin is Literal:
        return " \\| ".join(f"`{json.dumps(choice)}`" for choice in typing.get_args(hint))
    if origin is list:
        return f"list of {_type_name(typing.get_args(hint)[0])}s"
    if origin is dict:
        return "table"
    return {str: "string", int: "integer", float: "number", bool: "boolean"}.get(hint, str(hint))


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        text = repr(value)
        text = text[:-2] if text.endswith(".0") else text
        return re.sub(r"e([+-])0*(\d)", r"e\1\2", text)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)


def _default(field: dataclasses.Field) -> Any:
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return field.default


def _section_table(cls: type, prefix: str) -> list[str]:
    hints = typing.get_type_hints(cls)
    bounds = field_bounds(cls)
    docs = field_docs(cls)
    rows = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for field in dataclasses.fields(cls):
        meaning = docs.get(field.name, "").replace("|", "\\|")
        bound = bounds.get(field.name)
        kind = _type_name(hints[field.name]) + (f", {bound}" if bound else "")
        rows.append(
            f"| `{prefix}{field.name}` | {kind} | `{_toml_value(_default(field))}` | {meaning} |"
        )
    return rows


def undocumented_fields() -> list[str]:
    """Config keys without a comment (a test keeps this empty)."""
    missing = []
    for section, cls in _sections():
        docs = field_docs(cls)
        missing += [f"{section}.{f.name}" for f in dataclasses.fields(cls) if not docs.get(f.name)]
    return missing


def _sections() -> list[tuple[str, type]]:
    hints = typing.get_type_hints(Config)
    sections = []
    for field in dataclasses.fields(Config):
        hint = hints[field.name]
        if typing.get_origin(hint) is list:  # [[rewards]]: an array of tables
            hint = typing.get_args(hint)[0]
        sections.append((field.name, hint))
    return sections


def config_reference() -> str:
    """The reference as Markdown: one table per section, in the order of :class:`Config`."""
    hints = typing.get_type_hints(Config)
    parts = [
        "Generated from the comments in `src/grpo/config/sections.py`. Every key can also be",
        "set on the command line as `--section.key=value`.",
    ]
    for section, cls in _sections():
        is_array = typing.get_origin(hints[section]) is list
        header = f"[[{section}]]" if is_array else f"[{section}]"
        summary = (inspect.getdoc(cls) or "").replace("\n", " ")
        parts += ["", f"## `{header}`", ""]
        if summary:
            parts += [summary, ""]
        prefix = "" if is_array else f"{section}."
        parts += _section_table(cls, prefix)
    return "\n".join(parts) + "\n"


def metrics_glossary() -> str:
    """The glossary as Markdown: one row per key of :data:`MEANINGS`, in its order."""
    rows = ["| key | meaning |", "|---|---|"]
    for key, meaning in MEANINGS.items():
        escaped = meaning.replace("|", "\\|")
        rows.append(f"| `{key}` | {escaped} |")
    return "\n".join(rows) + "\n"


def glossary_mismatches() -> tuple[list[str], list[str]]:
    """(metrics without a meaning, meanings of no metric); tests keep both empty."""
    unexplained = [row.key for row in METRICS if row.key not in MEANINGS]
    unknown = []
    for key in MEANINGS:
        try:
            metric(key)
        except KeyError:
            if key != "step":  # every line of metrics.jsonl has it; nothing reduces it
                unknown.append(key)
    return unexplained, unknown


GENERATORS = {"config reference": config_reference, "metrics glossary": metrics_glossary}


def _markers(name: str) -> tuple[str, str]:
    return f"<!-- BEGIN GENERATED {name}: `{REGENERATE}` -->", f"<!-- END GENERATED {name} -->"


def with_generated(text: str) -> str:
    """``text`` with every generated block it holds replaced by a fresh one."""
    for name, generate in GENERATORS.items():
        begin, end = _markers(name)
        if begin not in text:
            continue
        head, rest = text.split(begin, 1)
        if end not in rest:
            raise ValueError(f"{begin!r} has no {end!r} after it")
        _, tail = rest.split(end, 1)
        text = f"{head}{begin}\n{generate()}{end}{tail}"
    return text


def generated_pages(target: str | Path) -> list[Path]:
    """The Markdown pages under ``target`` (a page or a folder) that hold a generated block."""
    path = Path(target)
    pages = sorted(path.rglob("*.md")) if path.is_dir() else [path]
    begins = [_markers(name)[0] for name in GENERATORS]
    found = [page for page in pages if any(b in page.read_text() for b in begins)]
    if not found:
        raise ValueError(f"{target}: no page holds a generated block ({begins[0]!r} …)")
    return found


def stale_pages(target: str | Path) -> list[Path]:
    """The pages under ``target`` whose generated blocks are out of date."""
    return [
        page
        for page in generated_pages(target)
        if with_generated(page.read_text()) != page.read_text()
    ]


def write_pages(target: str | Path) -> list[Path]:
    """Refresh the generated blocks of the pages under ``target``; the pages that changed."""
    changed = []
    for page in generated_pages(target):
        old = page.read_text()
        new = with_generated(old)
        if new != old:
            page.write_text(new)
            changed.append(page)
    return changed
