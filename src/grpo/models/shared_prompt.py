"""The prompt once per group in the training passes: its keys and values shared by the G rows.

A step's rows come in groups of G completions of one prompt, and the policy and reference
passes would otherwise run every prompt token G times. Here the N distinct prompts of a
batch go through the model once (a KV cache), the cache is expanded to the B rows by
indexing (row b reads its prompt's keys and values), and the completions run on top of it:

    prefix:      h_n,p, K_n,p, V_n,p = f(prompt_n)                    (N rows, P columns)
    completion:  h_b,t = f(y_b,t | K_{n(b)}, V_{n(b)}, y_b,<t)        (B rows, T − 1 columns)

Every output equals the one-pass output on ``[prompt_b, y_b]`` (the same causal attention
over the same keys and values), up to floating-point reassociation. The indexing is
differentiable, so autograd sums each group's gradient back into its one prompt pass.
Completion token 0 is predicted by the prompt's last position, token t > 0 by completion
position t − 1: the last completion token is never fed.

Works wherever the model's forward accepts a ``DynamicCache`` of full-attention layers and
keeps it in training: not under DDP/FSDP (they must see one forward per backward), nor with
gradient checkpointing (transformers drops the cache there), nor with sliding-window
layers; :func:`sharing_blocker` names the reason, and callers take the one-pass path.
"""

from __future__ import annotations

import torch
from torch import nn

from grpo.models.wrappers import base_model, cache_kwarg, is_fsdp_sharded


def prompt_groups(
    prompt_ids_BP: torch.Tensor, prompt_mask_BP: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(first_N, group_B): the first row of each run of equal consecutive prompts, and each
    row's run index; None when no two neighbouring rows share a prompt (nothing to save).

    Prompts are equal when their masks and their real tokens are; the ids under padding are
    ignored. Rows of one group are consecutive in a step, so runs are groups (or, when a
    micro-batch cuts a group, the part of it that the micro-batch holds).
    """
    rows = prompt_ids_BP.shape[0]
    if rows < 2:
        return None
    key_BX = torch.cat([prompt_ids_BP * prompt_mask_BP, prompt_mask_BP], dim=1)
    starts_B = torch.ones(rows, dtype=torch.bool, device=key_BX.device)
    starts_B[1:] = (key_BX[1:] != key_BX[:-1]).any(dim=1)
    first_N = starts_B.nonzero().squeeze(1)
    if first_N.shape[0] == rows:
        return None
    return first_N, starts_B.long().cumsum(dim=0) - 1


def _all_full_attention(model: nn.Module) -> bool:
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    config = getattr(base_model(model), "config", None)
    try:
        layers = DynamicCache(config=config).layers if config is not None else []
    except (AttributeError, KeyError, TypeError, ValueError):  # a config it cannot read
        return False
    return all(type(layer) is DynamicLayer for layer in layers)


def sharing_blocker(model: nn.Module) -> str | None:
    """Why ``model`` cannot share a prompt's pass across its group (None: it can)."""
    if hasattr(model, "module"):
        return "DDP runs one forward per backward"
    if is_fsdp_sharded(model):
        return "FSDP runs one forward per backward"
    inner = base_model(model)
    # transformers ≥ 5 calls it is_activation_checkpointing (the old name warns).
    name = "is_activation_checkpointing"
    checkpointing = getattr(
        inner, name if hasattr(inner, name) else "is_gradient_checkpointing", False
    )
    if checkpointing and torch.is_grad_enabled():
        return "gradient checkpointing drops the KV cache in training"
    if not _all_full_attention(model):
        return "the model has sliding-window or other non-full-attention cache layers"
    return None


def shared_prompt_outputs(
    module: nn.Module,
    input_ids_BL: torch.Tensor,
    attention_mask_BL: torch.Tensor,
    position_ids_BL: torch.Tensor,
    prompt_width: int,
    groups: tuple[torch.Tensor, torch.Tensor],
    *,
    logits: bool,
) -> torch.Tensor:
    """The outputs that predict each completion token, (B, T, ·), the prompt run once per group.

    The inputs are the one-pass forward's: rows ``[prompt_b, completion_b]`` of L = P + T
    columns, the first ``prompt_width`` = P of them the prompt. ``module`` is a decoder
    (``logits=False``: its last hidden states, (B, T, H)) or a causal LM (``logits=True``: its
    logits, (B, T, V)); ``groups`` is :func:`prompt_groups`' answer. Row b, column t holds what
    the one-pass forward gives at position P − 1 + t.
    """
    from transformers import DynamicCache

    first_N, group_B = groups
    prompt = slice(0, prompt_width)
    cache = DynamicCache()
    cache_name = cache_kwarg(module)
    extra = {"logits_to_keep": 1} if logits else {}
    prefix = module(
        input_ids=input_ids_BL[first_N, prompt],
        attention_mask=attention_mask_BL[first_N, prompt],
        position_ids=position_ids_BL[first_N, prompt],
        use_cache=True,
        **extra,
        **{cache_name: cache},
    )
    last_N1X = prefix.logits[:, -1:] if logits else prefix.last_hidden_state[:, -1:]
    first_column_B1X = last_N1X[group_B]
    if input_ids_BL.shape[1] == prompt_width + 1:  # one completion column: nothing more to run
        return first_column_B1X
    cache.batch_select_indices(group_B)  # differentiable: gradients flow back per group
    # The last completion token predicts nothing that is scored: it is not fed.
    rest = module(
        input_ids=input_ids_BL[:, prompt_width:-1],
        attention_mask=attention_mask_BL[:, :-1],
        position_ids=position_ids_BL[:, prompt_width:-1],
        use_cache=True,
        **{cache_name: cache},
    )
    rest_BTX = rest.logits if logits else rest.last_hidden_state
    return torch.cat([first_column_B1X, rest_BTX], dim=1)
