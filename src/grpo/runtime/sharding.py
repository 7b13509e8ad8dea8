"""How the trained model meets several processes: DDP or FSDP2 wrapping, local gradient
accumulation, and full (gathered) state dicts for checkpoints under FSDP."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from grpo.models.wrappers import base_model
from grpo.runtime.distributed import Dist


def _sum_gradients_hook(state, bucket):  # unannotated: DDP checks the annotations
    """DDP communication hook: all-reduce SUM (DDP's default divides by the world size).

    Each process's loss is already its share of the whole step's loss (the normalizers
    count every process's rows), so the sum is the single-process gradient exactly.
    """
    work = torch.distributed.all_reduce(bucket.buffer(), async_op=True)
    return work.get_future().then(lambda future: future.value()[0])


def wrap_for_training(model: nn.Module, dist: Dist) -> nn.Module:
    """The module the update runs forward/backward on: DDP, FSDP2 in place, or ``model``.

    Generation, evaluation and saving use ``model`` itself (for DDP the wrapped module
    shares its parameters).
    """
    if not dist.enabled:
        return model
    if dist.fsdp:
        return shard_fsdp(model, dist)
    from torch.nn.parallel import DistributedDataParallel

    device_ids = [dist.local_rank] if dist.comm_device.type == "cuda" else None
    # Buffers (rotary tables) are identical everywhere: no broadcast on every forward
    # (newer torch spells it forward_sync_buffers and deprecates broadcast_buffers).
    parameters = inspect.signature(DistributedDataParallel.__init__).parameters
    no_buffer_sync = (
        {"forward_sync_buffers": False}
        if "forward_sync_buffers" in parameters
        else {"broadcast_buffers": False}
    )
    wrapped = DistributedDataParallel(model, device_ids=device_ids, **no_buffer_sync)
    wrapped.register_comm_hook(None, _sum_gradients_hook)
    return wrapped


def shard_fsdp(model: nn.Module, dist: Dist) -> nn.Module:
    """FSDP2: ``fully_shard`` each decoder layer, then the root; gradients summed, not averaged."""
    try:
        from torch.distributed.fsdp import FSDPModule, fully_shard
    except ImportError:  # older torch
        from torch.distributed._composable.fsdp import FSDPModule, fully_shard

    for layer in _decoder_layers(model):
        fully_shard(layer)
    fully_shard(model)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            if hasattr(module, "set_gradient_divide_factor"):
                module.set_gradient_divide_factor(1.0)
            else:  # older torch
                module.set_reduce_scatter_divide_factor(1.0)
            if hasattr(module, "set_force_sum_reduction_for_comms"):
                # gloo has no PREMUL_SUM: plain SUM reductions (the factor is 1 anyway).
                module.set_force_sum_reduction_for_comms(True)
    return model


def _decoder_layers(model: nn.Module) -> list[nn.Module]:
    inner = getattr(base_model(model), "model", None)
    layers = getattr(inner, "layers", None)
    if isinstance(layers, nn.ModuleList):
        return list(layers)
    return [m for m in model.modules() if type(m).__name__.endswith("DecoderLayer")]


def no_sync_context(model: nn.Module, dist: Dist) -> Callable[[], Any] | None:
    """A context in which backward accumulates gradients locally, without communication."""
    if not dist.enabled:
        return None
    if dist.fsdp:

        @contextlib.contextmanager
        def fsdp_no_sync() -> Iterator[None]:
            model.set_requires_gradient_sync(False)
            try:
                yield
            finally:
                model.set_requires_gradient_sync(True)

        return fsdp_no_sync
    return model.no_sync


# --- full state dicts (FSDP) -----------------------------------------------------------


def full_model_state(model: nn.Module, dist: Dist) -> dict[str, torch.Tensor] | None:
    """Under FSDP the full, unsharded state dict on rank 0 (a collective: call on every
    rank); None otherwise (the model's own ``state_dict`` is already full)."""
    if not dist.fsdp:
        return None
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return get_model_state_dict(model, options=options)


def full_optimizer_state(
    model: nn.Module, optimizer: torch.optim.Optimizer, dist: Dist
) -> dict[str, Any] | None:
    """Under FSDP the full optimizer state on rank 0 (collective); None otherwise."""
    if not dist.fsdp:
        return None
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_optimizer_state_dict,
    )

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return get_optimizer_state_dict(model, optimizer, options=options)


def load_optimizer_state(
    model: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any], dist: Dist
) -> None:
    """Restore a checkpoint's optimizer state (a full one under FSDP, resharded here)."""
    if not dist.fsdp:
        optimizer.load_state_dict(state)
        return
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        set_optimizer_state_dict,
    )

    set_optimizer_state_dict(
        model, optimizer, state, options=StateDictOptions(full_state_dict=True)
    )
