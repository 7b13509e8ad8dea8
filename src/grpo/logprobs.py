"""Per-token log-probabilities of completion tokens under a causal LM (tensor in, tensor out).

Layout shared with the rollout: each row is ``[prompt left-padded to P][completion
right-padded to T]``, so every completion starts at column P and only the last T + 1
logits are needed (``logits_to_keep``): the model never materialises P·V logits.
"""

from __future__ import annotations

import inspect
from functools import cache

import torch
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


def positions_from_mask(attention_mask_BL: torch.Tensor) -> torch.Tensor:
    """Position ids that skip left padding: 0 at each row's first real token."""
    return (attention_mask_BL.long().cumsum(dim=-1) - 1).clamp(min=0)


def token_logprobs(logits_BTV: torch.Tensor, tokens_BT: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[token] without a second (B, T, V) tensor: logit − logsumexp."""
    picked_BT = logits_BTV.gather(-1, tokens_BT.unsqueeze(-1)).squeeze(-1)
    return picked_BT.float() - torch.logsumexp(logits_BTV.float(), dim=-1)


def entropy_from_logits(logits_BTV: torch.Tensor) -> torch.Tensor:
    """Per-position entropy −Σ_v p_v log p_v of softmax(logits), for metrics."""
    logp_BTV = torch.log_softmax(logits_BTV.float(), dim=-1)
    return -(logp_BTV.exp() * logp_BTV).sum(dim=-1)


def completion_logprobs(
    model: nn.Module,
    prompt_ids_BP: torch.Tensor,
    prompt_mask_BP: torch.Tensor,
    completion_ids_BT: torch.Tensor,
    completion_mask_BT: torch.Tensor,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log π(y_t | x, y_<t) at temperature τ for every completion position, shape (B, T).

    The policy the loss optimises is softmax(logits / τ), the distribution the rollout
    sampled from, so the ratio is 1 on-policy. Entropy (B, T) is returned when asked,
    computed without gradient.
    """
    input_ids_BL = torch.cat([prompt_ids_BP, completion_ids_BT], dim=1)
    attention_mask_BL = torch.cat([prompt_mask_BP, completion_mask_BT], dim=1)
    completion_length = completion_ids_BT.shape[1]
    logits_BTV = model(
        input_ids=input_ids_BL,
        attention_mask=attention_mask_BL,
        position_ids=positions_from_mask(attention_mask_BL),
        use_cache=False,
        logits_to_keep=completion_length + 1,
    ).logits[:, :-1, :]
    if temperature != 1.0:
        logits_BTV = logits_BTV / temperature
    logp_BT = token_logprobs(logits_BTV, completion_ids_BT)
    entropy_BT = None
    if with_entropy:
        with torch.no_grad():
            entropy_BT = entropy_from_logits(logits_BTV)
    return logp_BT, entropy_BT
