"""Look-ups through the wrappers a model may wear (DDP, FSDP2, PEFT): its base model, the
name of its KV-cache argument, whether it is sharded."""

from __future__ import annotations

import inspect
from functools import cache

from torch import nn


@cache
def _cache_kwarg_for(model_class: type) -> str:
    # transformers ≥ 5.20 renamed `past_key_values` to `cache`; support both.
    params = inspect.signature(model_class.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def base_model(model: nn.Module) -> nn.Module:
    """The transformers model under DDP/FSDP/PEFT wrappers (for attribute look-ups only)."""
    while True:
        if hasattr(model, "module") and isinstance(model.module, nn.Module):
            model = model.module
        elif hasattr(model, "get_base_model"):
            model = model.get_base_model()
        else:
            return model


def cache_kwarg(model: nn.Module) -> str:
    return _cache_kwarg_for(type(base_model(model)))


def is_fsdp_sharded(model: nn.Module) -> bool:
    """Whether ``model`` is an FSDP2 (``fully_shard``) module."""
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # torch < 2.6
        from torch.distributed._composable.fsdp import FSDPModule
    return isinstance(model, FSDPModule)
