"""``grpo report`` and ``grpo plot``: a finished run's metrics as PNG plots and an HTML page,
or one metric as a text curve."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from grpo.cli.common import Commands


def cmd_report(args: argparse.Namespace, overrides: list[str]) -> int:
    from grpo.log.report import write_report

    try:
        page = write_report(args.run_dir, args.out)
    except ImportError as error:  # matplotlib is an optional extra
        print(f"grpo report: error: {error}", file=sys.stderr)
        return 2
    print(f"report written to {page} (open it in a browser; the PNGs are beside it)")
    return 0


def cmd_plot(args: argparse.Namespace, overrides: list[str]) -> int:
    from grpo.log.metrics import read_metrics, text_curve

    rows = read_metrics(args.run_dir)
    values = [row[args.key] for row in rows if args.key in row]
    steps = [row["step"] for row in rows if args.key in row]
    if not values:
        print(f"no {args.key!r} in {Path(args.run_dir) / 'metrics.jsonl'}", file=sys.stderr)
        return 1
    print(text_curve(values, label=args.key, steps=steps))
    return 0


def add_report_parser(commands: Commands) -> None:
    report = commands.add_parser(
        "report", help="PNG plots and an HTML page (with sample completions) of a run"
    )
    report.add_argument("run_dir")
    report.add_argument("--out", help="output folder (default RUN_DIR/report)")
    report.set_defaults(handler=cmd_report)


def add_plot_parser(commands: Commands) -> None:
    plot = commands.add_parser("plot", help="plot a metric of a run as text")
    plot.add_argument("run_dir")
    plot.add_argument("--key", default="reward/mean")
    plot.set_defaults(handler=cmd_plot)
