"""``grpo report RUN_DIR``: PNG plots of a run's metrics and an HTML page with them and
sample completions, written to RUN_DIR/report/.

The plots (matplotlib, the ``plot`` extra): reward, accuracy, KL, completion length,
zero-variance fraction, clip fraction, gradient norm and loss, the signs of learned
reasoning (length by estimated difficulty, ``<think>`` length, self-correction rate), the
split of each step's time; a run with asynchronous rollouts also gets the version lag (over
steps, and as a histogram of the groups trained) and the idle and weight-sync seconds; an
agent run its turns and tool calls, its shares (tool-call rate, inserted tokens, rows cut at
max_turns), its errors by kind and its tool seconds, and its sampled conversations, each
message styled by who wrote it. Those plots are drawn only for runs that logged their
metrics; a core plot whose metric the run did not log (KL at β = 0) says so.
The page is static (no scripts, nothing loaded from outside the folder); every piece of
text from the run, prompts and completions included, is HTML-escaped.
"""

from __future__ import annotations

import fnmatch
import html
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo.log.metrics import read_completions, read_metrics
from grpo.log.samples import CONVERSATION_STYLE, samples_section


@dataclass(frozen=True)
class Plot:
    file: str
    title: str
    series: tuple[str, ...]  # metric keys drawn as lines; "a/*/b": each such key not all 0
    note: str = ""  # shown when none of the series was logged
    stacked: bool = False  # an area chart of parts of a whole (the step-time split)
    histogram: str = ""  # bars of Σ over steps of the keys PREFIX<n>, by n (series unused)
    only_with: str = ""  # drawn only for runs that logged a key with this prefix


PLOTS = (
    Plot("reward.png", "Reward (mean over the step's completions)", ("reward/mean",)),
    Plot(
        "accuracy.png",
        "Accuracy (training rows; held-out greedy as dots)",
        ("accuracy", "eval/accuracy"),
        note="no accuracy reward in this run",
    ),
    Plot("kl.png", "KL to the reference", ("kl",), note="KL is logged when algorithm.beta > 0"),
    Plot(
        "completion_length.png",
        "Completion length (tokens)",
        ("completion_len/mean", "completion_len/max"),
    ),
    Plot("zero_variance.png", "Fraction of zero-variance groups", ("zero_variance_frac",)),
    Plot(
        "clip_fraction.png",
        "Fraction of tokens clipped",
        ("clip_frac", "clip_frac_low", "clip_frac_high"),
    ),
    Plot("grad_norm.png", "Gradient norm and loss", ("grad_norm", "loss")),
    Plot(
        "reasoning_length.png",
        "Completion length by estimated difficulty (tokens)",
        ("reasoning/len_hard", "reasoning/len_medium", "reasoning/len_easy"),
    ),
    Plot(
        "thinking.png",
        "Thinking: <think> characters (and share of completions with one)",
        ("reasoning/think_chars", "reasoning/think_frac"),
        note="no completion had a <think> block",
    ),
    Plot(
        "self_correction.png",
        "Share of completions with a self-correction phrase",
        ("reasoning/self_correction_rate",),
        note="train.self_correction_phrases",
    ),
    Plot(
        "step_time.png",
        "Seconds per step: rollout, reward, train",
        ("time/rollout", "time/reward", "time/train"),
        stacked=True,
    ),
    Plot(
        "version_lag.png",
        "Asynchronous rollouts: versions behind the trained weights",
        ("async/version_lag_mean", "async/version_lag_max"),
        only_with="async/",
    ),
    Plot(
        "version_lag_histogram.png",
        "Asynchronous rollouts: groups trained, by version lag",
        (),
        histogram="async/groups_at_lag/",
        only_with="async/",
    ),
    Plot(
        "async_idle.png",
        "Asynchronous rollouts: idle and weight-sync seconds per step",
        ("async/learner_idle_s", "async/worker_idle_s", "async/sync_s"),
        only_with="async/",
    ),
    Plot(
        "agent_turns.png",
        "Agents: turns and tool calls per trajectory",
        ("agent/turns/mean", "agent/tool_calls/mean"),
        only_with="agent/",
    ),
    Plot(
        "agent_shares.png",
        "Agents: trajectories with a tool call, cut at max_turns; inserted tokens",
        ("agent/tool_call_frac", "agent/cut_at_max_turns_frac", "agent/env_token_frac"),
        only_with="agent/",
    ),
    Plot(
        "agent_errors.png",
        "Agents: bad tool calls and environment failures, by kind",
        ("agent/*/errors",),
        note="no errors of any kind",
        only_with="agent/",
    ),
    Plot(
        "agent_tool_seconds.png",
        "Agents: seconds in tool calls per step",
        ("agent/tool/seconds",),
        only_with="agent/",
    ),
)


def plots_for(rows: list[dict[str, Any]]) -> list[Plot]:
    """The plots of a run: the asynchronous and agent ones only when it logged metrics of
    theirs."""
    logged = {key for row in rows for key in row}
    return [p for p in PLOTS if not p.only_with or any(k.startswith(p.only_with) for k in logged)]


def _smooth(values: list[float], window: int) -> list[float]:
    """Trailing moving average over ``window`` points (the first ones over fewer)."""
    out, total = [], 0.0
    for index, value in enumerate(values):
        total += value
        if index >= window:
            total -= values[index - window]
        out.append(total / min(index + 1, window))
    return out


def _series(rows: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    points = [(row["step"], row[key]) for row in rows if isinstance(row.get(key), int | float)]
    return [step for step, _ in points], [float(value) for _, value in points]


def _histogram(rows: list[dict[str, Any]], prefix: str) -> dict[int, float]:
    """Σ over steps of each ``PREFIX<n>`` key, by n."""
    totals: dict[int, float] = {}
    for row in rows:
        for key, value in row.items():
            if key.startswith(prefix) and key[len(prefix) :].isdigit():
                n = int(key[len(prefix) :])
                totals[n] = totals.get(n, 0.0) + float(value)
    return dict(sorted(totals.items()))


def _keys(plot: Plot, rows: list[dict[str, Any]]) -> list[str]:
    """The series drawn: the named keys the run logged, and for a pattern each key it
    matches with a value other than 0 (errors of a kind that never happened stay out)."""
    keys = []
    for key in plot.series:
        if "*" not in key:
            keys += [key] if _series(rows, key)[1] else []
            continue
        matched = sorted({k for row in rows for k in row if fnmatch.fnmatchcase(k, key)})
        keys += [k for k in matched if any(_series(rows, k)[1])]
    return keys


def _empty_reason(plot: Plot, rows: list[dict[str, Any]]) -> str:
    """Why a plot has no line: its keys were never logged, or were 0 at every step."""
    logged = any(fnmatch.fnmatchcase(k, key) for row in rows for k in row for key in plot.series)
    return "0 at every step" if logged else "not logged in this run"


def draw_plot(plot: Plot, rows: list[dict[str, Any]], path: Path) -> None:
    """One PNG for ``plot`` from the metric rows."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    figure = Figure(figsize=(6.4, 3.6), dpi=100, layout="constrained")
    axes = figure.add_subplot()
    axes.set_title(plot.title, fontsize=11)
    axes.set_xlabel("step")
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.grid(alpha=0.3)
    drawn = _keys(plot, rows)
    if plot.histogram and (bars := _histogram(rows, plot.histogram)):
        axes.bar(list(bars), list(bars.values()))
        axes.set_xlabel("lag (versions)")
        drawn = ["histogram"]
    if plot.stacked and drawn:
        steps = [row["step"] for row in rows if all(key in row for key in drawn)]
        parts = [[row[key] for row in rows if all(k in row for k in drawn)] for key in drawn]
        axes.stackplot(steps, *parts, labels=drawn, alpha=0.8)
    for key in [] if plot.stacked else drawn:
        steps, values = _series(rows, key)
        if key.startswith("eval/"):
            axes.plot(steps, values, "o-", label=key)
            continue
        window = max(1, len(values) // 50)
        if window > 1:
            axes.plot(steps, values, alpha=0.25, linewidth=0.8)
            axes.plot(steps, _smooth(values, window), label=f"{key} (mean of {window})")
        else:
            axes.plot(steps, values, label=key)
    if drawn and not plot.histogram:
        axes.legend(fontsize=8)
    else:
        axes.text(
            0.5,
            0.5,
            f"{_empty_reason(plot, rows)}\n{plot.note}".strip(),
            ha="center",
            va="center",
            transform=axes.transAxes,
        )
    figure.savefig(path)


def _summary(rows: list[dict[str, Any]], config: dict[str, Any]) -> list[tuple[str, str]]:
    trained = [row for row in rows if "reward/mean" in row]
    items: list[tuple[str, str]] = [("steps logged", str(len(trained)))]
    if trained:
        first, last = trained[0]["reward/mean"], trained[-1]["reward/mean"]
        items.append(("reward/mean, first → last step", f"{first:.4g} → {last:.4g}"))
        seconds = sum(row.get("time/step", 0.0) for row in trained)
        items.append(("training time (sum of time/step)", f"{seconds:.1f} s"))
    _, evals = _series(rows, "eval/accuracy")
    if evals:
        items.append(
            ("held-out greedy accuracy, first → last", f"{evals[0]:.1%} → {evals[-1]:.1%}")
        )
    for section, key in (
        ("model", "path"),
        ("rollout", "group_size"),
        ("train", "prompts_per_step"),
        ("optim", "lr"),
        ("algorithm", "beta"),
    ):
        if key in config.get(section, {}):
            items.append((f"{section}.{key}", str(config[section][key])))
    return items


STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1400px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; }
.plots { display: grid; grid-template-columns: repeat(auto-fill, minmax(480px, 1fr)); gap: 1em; }
.plots img { width: 100%; border: 1px solid #ddd; }
table { border-collapse: collapse; font-size: 0.85em; }
td, th { border: 1px solid #ccc; padding: 0.3em 0.5em; vertical-align: top; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
pre { margin: 0; white-space: pre-wrap; word-break: break-word; max-width: 40em; }
"""


def render_page(
    run_dir: Path, rows: list[dict[str, Any]], completions: list[dict[str, Any]], config: dict
) -> str:
    """The HTML page: summary, the plots (by relative file name), sample completions."""
    title = html.escape(f"grpo report: {run_dir.name}")
    summary = "".join(
        f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>"
        for k, v in _summary(rows, config)
    )
    images = "".join(
        f'<figure><img src="{plot.file}" alt="{html.escape(plot.title)}"></figure>'
        for plot in plots_for(rows)
    )
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{title}</title>\n<style>{STYLE}{CONVERSATION_STYLE}</style>\n</head>\n"
        f"<body>\n<h1>{title}</h1>\n"
        f"<p>Run directory: <code>{html.escape(str(run_dir))}</code></p>\n"
        f'<table>{summary}</table>\n<h2>Metrics</h2>\n<div class="plots">{images}</div>\n'
        f"{samples_section(completions)}\n</body>\n</html>\n"
    )


def write_report(run_dir: str | Path, out_dir: str | Path | None = None) -> Path:
    """Write the PNGs and ``index.html`` to ``out_dir`` (default RUN_DIR/report); returns
    the page's path."""
    run_dir = Path(run_dir)
    if not (run_dir / "metrics.jsonl").exists():
        raise FileNotFoundError(f"{run_dir / 'metrics.jsonl'} not found: is it a run directory?")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ImportError("grpo report draws with matplotlib: pip install 'grpo[plot]'") from None
    out = Path(out_dir) if out_dir is not None else run_dir / "report"
    out.mkdir(parents=True, exist_ok=True)
    rows = read_metrics(run_dir)
    for plot in plots_for(rows):
        draw_plot(plot, rows, out / plot.file)
    config_path = run_dir / "config.json"
    config = json.loads(config_path.read_text()) if config_path.exists() else {}
    page = out / "index.html"
    page.write_text(render_page(run_dir, rows, read_completions(run_dir), config))
    return page
