"""Weights sent from the learner to rollout workers, and loaded there.

The first sync of a run sends every tensor of the state dict (the policy may come from a
checkpoint); later ones send only the parameters that train, since nothing else changes.
Under LoRA that is the adapter alone, which is both the bandwidth win and the trap to avoid:
the worker's PEFT model holds the same frozen base, so base + synced adapter is the learner's
effective policy (verl#7495 sent the frozen base instead).
"""

from __future__ import annotations

import torch
from torch import nn


def weights_to_sync(model: nn.Module, *, full: bool) -> dict[str, torch.Tensor]:
    """Detached copies of ``model``'s state (``full``) or of its trainable parameters, by
    state-dict name. Copies: the learner keeps training its own tensors while they travel."""
    if full:
        return {name: t.detach().clone() for name, t in model.state_dict().items()}
    return {name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad}


def sync_bytes(weights: dict[str, torch.Tensor]) -> int:
    """The payload's size: Σ numel · element size."""
    return sum(t.numel() * t.element_size() for t in weights.values())


def load_synced(model: nn.Module, weights: dict[str, torch.Tensor]) -> None:
    """Copy ``weights`` into ``model`` in place; a name the model lacks is an error (a
    learner and a worker built differently must not train on garbage)."""
    own = dict(model.named_parameters()) | dict(model.named_buffers())
    state = model.state_dict(keep_vars=True)
    unknown = [name for name in weights if name not in state and name not in own]
    if unknown:
        raise KeyError(f"weights the rollout worker's model lacks: {unknown[:5]}")
    with torch.no_grad():
        for name, value in weights.items():
            target = state[name] if name in state else own[name]
            target.copy_(value.to(device=target.device, dtype=target.dtype))
