"""The README is the front page: short, the two set-up commands, and every section linking
into the documentation pages under docs/ that hold the rest."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAX_LINES = 260
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)\s]*)?\)")


def _sections() -> dict[str, str]:
    """Each `## ` section's title → its text (subsections included)."""
    parts = re.split(r"^## (.+)$", README.read_text(), flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_the_readme_is_short() -> None:
    lines = len(README.read_text().splitlines())
    assert lines <= MAX_LINES, f"README.md has {lines} lines: move the detail into docs/"


def test_the_readme_keeps_the_two_set_up_commands() -> None:
    (block,) = re.findall(r"## Quick start.*?```bash\n(.*?)```", README.read_text(), re.DOTALL)
    commands = [line.split("  #")[0].strip() for line in block.splitlines()]
    assert commands == ["bash scripts/demo.sh", "bash scripts/test.sh"]
    assert "bash scripts/test.sh" in (ROOT / ".ci" / "run").read_text()


def test_every_section_links_into_the_docs() -> None:
    sections = _sections()
    assert len(sections) >= 5
    unlinked = [
        title
        for title, text in sections.items()
        if not any(target.startswith("docs/") for target in LINK.findall(text))
    ]
    assert unlinked == [], "these README sections link to no docs page"


def test_every_relative_link_of_the_readme_exists() -> None:
    targets = {t for t in LINK.findall(README.read_text()) if "://" not in t}
    missing = sorted(t for t in targets if not (ROOT / t).exists())
    assert missing == []
