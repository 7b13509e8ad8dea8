"""Configuration: frozen dataclasses loaded from TOML, with ``--section.key=value`` overrides.

An unknown key or a value of the wrong type or range is a :class:`ConfigError` naming the
key. The config is never mutated after loading; sizes derived from it live in
:class:`BatchPlan`.

The sections are in :mod:`grpo.config.sections` (each numeric field's range beside it),
reading and coercion in :mod:`grpo.config.loading`, the checks in
:mod:`grpo.config.validation` and the step sizes in :mod:`grpo.config.plan`; everything is
importable from here.
"""

from grpo.config.errors import ConfigError
from grpo.config.loading import config_to_dict, load_config
from grpo.config.plan import BatchPlan, batch_plan
from grpo.config.sections import (
    AgentConfig,
    AlgorithmConfig,
    Config,
    CurriculumConfig,
    DataConfig,
    DistributedConfig,
    EvalConfig,
    ModelConfig,
    OptimConfig,
    PPOConfig,
    RewardConfig,
    RolloutConfig,
    TrainConfig,
)
from grpo.config.validation import validate

__all__ = [
    "AgentConfig",
    "AlgorithmConfig",
    "BatchPlan",
    "Config",
    "ConfigError",
    "CurriculumConfig",
    "DataConfig",
    "DistributedConfig",
    "EvalConfig",
    "ModelConfig",
    "OptimConfig",
    "PPOConfig",
    "RewardConfig",
    "RolloutConfig",
    "TrainConfig",
    "batch_plan",
    "config_to_dict",
    "load_config",
    "validate",
]
