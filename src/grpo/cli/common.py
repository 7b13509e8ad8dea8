"""What several commands share: the subparser type, the override check, quiet transformers,
the early import of the code a config names."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from grpo.config import Config

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


def import_user_code(config: Config) -> None:
    """Import and check everything the config names (reward functions, ``eval.reward``, the
    agent's tools, environment and parser) before any model loads: a mistake is then one
    ``ConfigError`` line and exit 2 within seconds, not a traceback after the model loaded.
    The run resolves them again from the same ``train.import_dirs``, from the module cache."""
    from grpo.agents.environment import resolve_environment
    from grpo.agents.parser import get_parser
    from grpo.agents.tools import resolve_tools
    from grpo.config import ConfigError
    from grpo.rewards.resolve import resolve_function, resolve_reward_functions

    dirs = config.train.import_dirs
    resolve_reward_functions(config.rewards, dirs)
    if config.eval.reward:
        resolve_function(config.eval.reward, dirs, "eval.reward")
    agent = config.agent
    if not agent.enabled:
        return
    resolve_tools(agent.tools, dirs)
    if agent.environment:
        resolve_environment(agent.environment, dirs)
    try:
        get_parser(agent.parser)
    except ValueError as error:  # get_parser's own message names the field
        raise ConfigError(str(error)) from None
