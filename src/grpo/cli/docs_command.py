"""``grpo docs``: print the configuration reference or the metrics glossary of
:mod:`grpo.cli.docs`, refresh the docs pages' generated copies, or check that they are up
to date."""

from __future__ import annotations

import argparse
import sys

from grpo.cli.common import Commands


def cmd_docs(args: argparse.Namespace, overrides: list[str]) -> int:
    from grpo.cli.docs import (
        REGENERATE,
        config_reference,
        metrics_glossary,
        stale_pages,
        write_pages,
    )

    try:
        if args.check:
            stale = stale_pages(args.check)
            for page in stale:
                print(f"{page}: out of date; run {REGENERATE}", file=sys.stderr)
            if stale:
                return 1
            print(f"{args.check}: the generated pages are up to date")
        elif args.write:
            changed = write_pages(args.write)
            for page in changed:
                print(f"{page}: updated")
            if not changed:
                print(f"{args.write}: the generated pages were already up to date")
        else:
            print(metrics_glossary() if args.metrics else config_reference(), end="")
    except (OSError, ValueError) as error:
        print(f"grpo docs: error: {error}", file=sys.stderr)
        return 2
    return 0


def add_docs_parser(commands: Commands) -> None:
    docs = commands.add_parser(
        "docs",
        help="print the configuration reference or the metrics glossary, or refresh the docs "
        "pages generated from them",
    )
    docs_target = docs.add_mutually_exclusive_group()
    docs_target.add_argument(
        "--metrics", action="store_true", help="print the metrics glossary instead"
    )
    docs_target.add_argument(
        "--write",
        metavar="PATH",
        help="refresh the generated blocks of a page, or of every page "
        "in a folder (grpo docs --write docs)",
    )
    docs_target.add_argument(
        "--check", metavar="PATH", help="exit 1 when a page's generated block is out of date"
    )
    docs.set_defaults(handler=cmd_docs)
