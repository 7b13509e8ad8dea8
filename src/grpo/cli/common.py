"""What several commands share: the subparser type, the override check, quiet transformers,
the early import of the code a config names and the early check of the models it names."""

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


def check_model_names(config: Config) -> None:
    """What each model the config names is, checked before any model loads
    (:func:`grpo.models.names.check_model_name`: files, a GGUF's header and architecture, the
    hub cache when offline, the architecture; no weights read): ``model.path`` (a causal LM),
    ``model.tokenizer_path`` and the ``path`` of each ``grpo.rewards:reward_model``. A mistake
    is one ``ModelError`` line and exit 2 within seconds."""
    from grpo.config import ConfigError
    from grpo.models.names import check_model_name, model_name
    from grpo.rewards.model import reward_model
    from grpo.rewards.resolve import resolve_function

    model = config.model
    check_model_name(model_name(model.path, "model.path"), "causal_lm")
    if model.tokenizer_path:
        check_model_name(model_name(model.tokenizer_path, "model.tokenizer_path"), "tokenizer")
    for index, reward in enumerate(config.rewards):
        if resolve_function(reward.function, config.train.import_dirs) is not reward_model:
            continue
        key = f"rewards[{index}].options.path"
        path = reward.options.get("path")
        if not isinstance(path, str):
            raise ConfigError(f"{key}: grpo.rewards:reward_model needs the reward model's path")
        check_model_name(model_name(path, key), "sequence_classifier")
