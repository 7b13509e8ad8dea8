"""grpo: Group Relative Policy Optimization for Hugging Face causal language models.

The algorithm core is pure tensor functions: :func:`group_advantages`,
:func:`leave_one_out_advantages`,
:func:`zero_variance_groups`, :func:`policy_loss`, :func:`aggregate`, :func:`kl_penalty`.
:func:`train` runs the whole loop from a :class:`Config` (see :func:`load_config`).
"""

from grpo.advantages import group_advantages, leave_one_out_advantages, zero_variance_groups
from grpo.config import Config, ConfigError, load_config
from grpo.kl import kl_penalty
from grpo.losses import aggregate, policy_loss

__version__ = "0.1.0"

__all__ = [
    "Config",
    "ConfigError",
    "aggregate",
    "group_advantages",
    "kl_penalty",
    "leave_one_out_advantages",
    "load_config",
    "policy_loss",
    "train",
    "zero_variance_groups",
]


def __getattr__(name: str):
    # The trainer pulls in transformers; import it only when asked for.
    if name == "train":
        from grpo.trainer import train

        return train
    raise AttributeError(f"module 'grpo' has no attribute {name!r}")
