"""The documentation site: it builds with ``mkdocs build --strict`` (no broken link or anchor,
no page outside the nav), its pages render in a real browser with nothing fetched from
outside, and every config example on its pages loads."""

from __future__ import annotations

import functools
import http.server
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from grpo.config import load_config

ROOT = Path(__file__).resolve().parents[1]
# Each page the browser opens: its path on the site, its title, and headings it must show.
RENDERED = {
    "": ("grpo", ["Where to read"]),
    "reference/configuration/": ("Configuration reference", ["[model]", "[[rewards]]", "[agent]"]),
    "reference/api/algo/": ("API: grpo.algo", ["advantages", "group_advantages", "kl_penalty"]),
}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("mkdocs", reason="mkdocs (the docs extra, part of dev)")
    site_dir = tmp_path_factory.mktemp("site")
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site_dir)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    return site_dir


def test_the_site_builds_strictly_with_every_page(site: Path) -> None:
    pages = sorted(p.relative_to(ROOT / "docs") for p in (ROOT / "docs").rglob("*.md"))
    for page in pages:
        html = "index.html" if page.name == "index.md" else f"{page.stem}/index.html"
        assert (site / page.parent / html).is_file(), page
    # The benchmark page is benchmarks/RESULTS.md, included whole.
    assert "The test suite's time" in (site / "benchmarks" / "index.html").read_text()
    # Docstrings as Markdown (scripts/griffe_docstrings.py): doctests highlighted as
    # sessions, Sphinx roles as code spans, `#{...}` counts as text rather than headings.
    api = (site / "reference" / "api" / "algo" / "index.html").read_text()
    assert '<span class="gp">&gt;&gt;&gt; </span>' in api
    assert ":func:" not in api and api.count("<h1") == 1


@pytest.fixture
def served(site: Path) -> Iterator[str]:
    """The built site over HTTP on a free local port (file:// pages behave differently)."""
    handler = functools.partial(QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def test_three_pages_render_in_headless_chromium(
    served: str, chromium_tab: tuple[Any, list[str]]
) -> None:
    tab, errors = chromium_tab
    outside: list[str] = []
    tab.on("request", lambda r: None if r.url.startswith(served) else outside.append(r.url))
    for path, (title, headings) in RENDERED.items():
        tab.goto(served + path, wait_until="load")
        assert tab.locator("article h1").first.inner_text().strip("¶ \n") == title, path
        shown = tab.locator("article h2, article h3").all_inner_texts()
        for heading in headings:
            assert any(heading in text for text in shown), (path, heading)
    assert errors == [] and outside == []


def _toml_examples() -> list:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return [
        pytest.param(block, id=f"{page.relative_to(ROOT)}[{index}]")
        for page in pages
        for index, block in enumerate(re.findall(r"```toml\n(.*?)```", page.read_text(), re.S))
    ]


@pytest.mark.parametrize("example", _toml_examples())
def test_every_config_example_loads(example: str, tmp_path: Path) -> None:
    """Each TOML block is a config or a part of one: completed with a model, data and a
    reward where it has none, it loads, so no example names a key that does not exist."""
    (tmp_path / "example.toml").write_text(example)
    completions = []
    if not re.search(r"^path\s*=", example, re.MULTILINE):
        completions.append("model.path='models/any'")
    if not re.search(r"^train_path\s*=", example, re.MULTILINE):
        completions.append("data.train_path='data/any.jsonl'")
    if "[[rewards]]" not in example and "environment =" not in example:
        completions.append("rewards=[{function='grpo.rewards:numeric_answer'}]")
    load_config(tmp_path / "example.toml", completions)
