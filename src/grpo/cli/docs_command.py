"""``grpo docs``: print the configuration reference of :mod:`grpo.cli.docs`, refresh the
README's copy, or check that it is up to date."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from grpo.cli.common import Commands


def cmd_docs(args: argparse.Namespace, overrides: list[str]) -> int:
    from grpo.cli.docs import config_reference, with_reference, write_reference

    if args.check:
        readme = Path(args.check)
        if with_reference(readme.read_text()) != readme.read_text():
            stale = f"{readme}: the configuration reference is out of date"
            print(f"{stale}; run grpo docs --write {readme}", file=sys.stderr)
            return 1
        print(f"{readme}: the configuration reference is up to date")
    elif args.write:
        changed = write_reference(args.write)
        print(f"{args.write}: configuration reference {'updated' if changed else 'unchanged'}")
    else:
        print(config_reference(), end="")
    return 0


def add_docs_parser(commands: Commands) -> None:
    docs = commands.add_parser(
        "docs", help="print the configuration reference (from config/sections.py)"
    )
    docs_target = docs.add_mutually_exclusive_group()
    docs_target.add_argument("--write", metavar="README", help="refresh the README's copy")
    docs_target.add_argument(
        "--check", metavar="README", help="exit 1 when the README's copy is out of date"
    )
    docs.set_defaults(handler=cmd_docs)
