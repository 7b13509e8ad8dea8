"""What several commands share: the subparser type, the override check, quiet transformers."""

from __future__ import annotations

import argparse
import sys

# The object ``add_subparsers`` returns, to which each command's parser is added.
Commands = argparse._SubParsersAction


def quiet_transformers() -> None:
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()


def bad_overrides(command: str, overrides: list[str]) -> bool:
    bad = [o for o in overrides if not (o.startswith("--") and "=" in o)]
    if bad:
        print(
            f"grpo {command}: unrecognised argument(s) {bad}; "
            "overrides look like --section.key=value",
            file=sys.stderr,
        )
    return bool(bad)
