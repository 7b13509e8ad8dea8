"""`grpo report`: valid PNGs, and an HTML page that loads in headless Chromium without a
console error (or, where no Chromium can be had, is checked by parsing it)."""

import json
import shutil
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from grpo.log.report import PLOTS, draw_plot, plots_for, write_report

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# The run is synchronous and single-turn: the async and agent plots are left out of its report.
SHOWN = [plot for plot in PLOTS if not plot.only_with]
HOSTILE = '<script>console.error("injected")</script><img src="nowhere.png"> a < b & c'


@pytest.fixture(scope="module")
def report_page(trained_run_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The report of the trained run, plus one logged completion full of HTML."""
    run_dir = tmp_path_factory.mktemp("report") / "run"
    shutil.copytree(trained_run_dir, run_dir)
    hostile = {
        "step": 5,
        "prompt": "<b>1+1=</b>",
        "completion": HOSTILE,
        "reward": 1.0,
        "rewards": {"numeric_answer": 1.0, "digit_fraction": 0.0},
        "advantage": 0.5,
    }
    with (run_dir / "completions.jsonl").open("a") as handle:
        handle.write(json.dumps(hostile) + "\n")
    return write_report(run_dir)


def test_every_plot_is_a_valid_png(report_page: Path) -> None:
    image = pytest.importorskip("matplotlib.image")
    assert not list(report_page.parent.glob("agent_*.png"))
    assert not list(report_page.parent.glob("*lag*.png")) + list(
        report_page.parent.glob("async_*.png")
    )
    for plot in SHOWN:
        path = report_page.parent / plot.file
        assert path.read_bytes()[:8] == PNG_SIGNATURE, plot.file
        pixels = image.imread(path)
        assert pixels.shape == (360, 640, 4), plot.file  # 6.4 × 3.6 inches at 100 dpi, RGBA
        assert pixels[..., :3].std() > 0.01, f"{plot.file} is blank"


def test_a_metric_the_run_did_not_log_gets_a_plot_saying_so(tmp_path: Path) -> None:
    image = pytest.importorskip("matplotlib.image")
    kl_plot = next(plot for plot in PLOTS if plot.file == "kl.png")
    draw_plot(kl_plot, [{"step": 1, "reward/mean": 0.5}], tmp_path / "kl.png")  # β = 0: no kl
    assert image.imread(tmp_path / "kl.png").shape == (360, 640, 4)


def test_the_async_plots_are_drawn_for_async_runs_only() -> None:
    asynchronous = {"async/version_lag_mean", "async/groups_at_lag/1", "async/sync_s"}
    async_plots = ["version_lag.png", "version_lag_histogram.png", "async_idle.png"]
    sync_row = {"step": 1, "reward/mean": 0.5}
    async_row = {**sync_row, **dict.fromkeys(asynchronous, 1.0)}
    assert not set(async_plots) & {plot.file for plot in plots_for([sync_row])}
    assert set(async_plots) <= {plot.file for plot in plots_for([async_row])}


class _PageParts(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.images: list[str] = []
        self.scripts = 0
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs) -> None:
        if tag == "img":
            self.images.append(dict(attrs)["src"])
        self.scripts += tag == "script"

    def handle_data(self, data) -> None:
        self.text.append(data)


def test_page_parses_links_every_plot_and_escapes_completions(report_page: Path) -> None:
    """The check that runs everywhere, Chromium or not: parse the page."""
    source = report_page.read_text()
    parts = _PageParts()
    parts.feed(source)
    assert parts.images == [plot.file for plot in SHOWN]
    assert all((report_page.parent / src).read_bytes()[:8] == PNG_SIGNATURE for src in parts.images)
    assert parts.scripts == 0  # the injected <script> stayed text
    assert HOSTILE in "".join(parts.text)  # shown verbatim
    assert "&lt;script&gt;console.error(&quot;injected&quot;)&lt;/script&gt;" in source
    assert "<h3>Step 2 (8 completions logged" in source and "<h3>Step 5 (1 completions" in source


def load_in_chromium(chromium_tab: tuple[Any, list[str]], page: Path) -> tuple[list[str], list]:
    """Open ``page`` in the headless Chromium tab; returns its console errors (including
    uncaught exceptions and failed loads) and each image's [src, naturalWidth, naturalHeight].
    Where no Chromium can be had these tests skip, and the page is checked by parsing its
    HTML instead (test_page_parses_links_every_plot_and_escapes_completions)."""
    tab, errors = chromium_tab
    tab.goto(page.as_uri(), wait_until="load")
    images = tab.evaluate(
        "Array.from(document.images).map(i => "
        "[i.getAttribute('src'), i.naturalWidth, i.naturalHeight])"
    )
    return errors, images


def test_page_loads_in_headless_chromium_without_console_errors(
    report_page: Path, chromium_tab: tuple[Any, list[str]]
) -> None:
    errors, images = load_in_chromium(chromium_tab, report_page)
    assert errors == []
    assert images == [[plot.file, 640, 360] for plot in SHOWN]  # every plot decoded


def test_the_chromium_check_does_catch_errors(
    tmp_path: Path, chromium_tab: tuple[Any, list[str]]
) -> None:
    """The harness above is not blind: a broken image and a script error are reported."""
    page = tmp_path / "broken.html"
    page.write_text(
        '<!DOCTYPE html><html><head><meta charset="utf-8"><title>t</title></head><body>'
        '<img src="missing.png"><script>console.error("boom"); notDefined();</script>'
        "</body></html>"
    )
    errors, images = load_in_chromium(chromium_tab, page)
    assert images == [["missing.png", 0, 0]]
    assert "boom" in errors
    assert any("ERR_FILE_NOT_FOUND" in error for error in errors)
    assert any("notDefined is not defined" in error for error in errors)
