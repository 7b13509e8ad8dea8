"""PPO's critic-side pieces (pure): terminal rewards, GAE, whitening, the clipped value loss.

GRPO's baseline is the group mean; PPO's is a learned value V(s_t) per completion token
(Schulman et al. 2017; the RLHF recipe of Ouyang et al. 2022). These functions turn one
scalar reward per completion and the critic's values into per-token advantages and the
critic's regression targets. Masks mean "keep"; completions are right-padded.

Multi-turn rollouts (``grpo.agents``) keep the tokens that tools and the environment
inserted between the model's turns in the completion columns with mask 0: they get no
reward, value, advantage or return, and GAE steps over them (see :func:`gae`).
"""

from __future__ import annotations

import torch


def terminal_rewards(rewards_B: torch.Tensor, mask_BT: torch.Tensor) -> torch.Tensor:
    """Place each completion's reward on its last kept token, zero elsewhere, shape (B, T).

    The last kept token is the highest position with mask 1: a multi-turn row's last model
    token, wherever inserted (mask 0) tokens sit before it.

    Example (the last row: model, model, inserted, model, padding):
        >>> terminal_rewards(torch.tensor([2.0, 5.0]), torch.tensor([[1, 1, 0], [1, 1, 1]]))
        tensor([[0., 2., 0.],
                [0., 0., 5.]])
        >>> terminal_rewards(torch.tensor([3.0]), torch.tensor([[1, 1, 0, 1, 0]]))
        tensor([[0., 0., 0., 3., 0.]])
    """
    keep_BT = mask_BT.bool()
    positions_T = torch.arange(mask_BT.shape[1], device=mask_BT.device)
    last_B = torch.where(keep_BT, positions_T, -1).max(dim=1).values
    rewards_BT = torch.zeros(mask_BT.shape, dtype=torch.float32, device=mask_BT.device)
    has_tokens_B = last_B >= 0
    rows_B = torch.arange(mask_BT.shape[0], device=mask_BT.device)[has_tokens_B]
    rewards_BT[rows_B, last_B[has_tokens_B]] = rewards_B.float().to(mask_BT.device)[has_tokens_B]
    return rewards_BT


def gae(
    rewards_BT: torch.Tensor,
    values_BT: torch.Tensor,
    mask_BT: torch.Tensor,
    *,
    gamma: float = 1.0,
    lam: float = 0.95,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation (Schulman et al. 2016), per token; (advantages, returns).

    Over each row's kept tokens t_1 < t_2 < … < t_n (mask 1), with V_{t_{n+1}} = A_{t_{n+1}} = 0:

    δ_{t_k} = r_{t_k} + γ·V_{t_{k+1}} − V_{t_k},   A_{t_k} = δ_{t_k} + γ·λ·A_{t_{k+1}},
    R_{t_k} = A_{t_k} + V_{t_k},

    so the episode ends at the last kept token (its δ is r − V). Masked positions get
    A = R = 0 and are no time step: the kept tokens are the trajectory, and a masked run
    between two of them (a multi-turn row's tool or environment tokens) is stepped over,
    costing no γ or λ factor; V at the next kept token already sees those tokens. For a
    single-turn completion (kept tokens, then padding) this is the usual recursion. λ = 1
    gives the Monte-Carlo return minus V; λ = 0 the one-step TD error.

    Example (γ = 1, λ = 1, one token of reward 1 after V = 0.5, 0.25):
        >>> gae(torch.tensor([[0.0, 1.0]]), torch.tensor([[0.5, 0.25]]), torch.ones(1, 2),
        ...     lam=1.0)[0]
        tensor([[0.5000, 0.7500]])
    """
    keep_BT = mask_BT.to(values_BT.dtype)
    values_BT = values_BT * keep_BT
    advantages_BT = torch.zeros_like(values_BT)
    next_value_B = torch.zeros_like(values_BT[:, 0])
    next_advantage_B = torch.zeros_like(values_BT[:, 0])
    for t in reversed(range(values_BT.shape[1])):
        delta_B = rewards_BT[:, t] + gamma * next_value_B - values_BT[:, t]
        advantage_B = (delta_B + gamma * lam * next_advantage_B) * keep_BT[:, t]
        advantages_BT[:, t] = advantage_B
        # A masked position passes the next kept token's V and A on unchanged.
        kept_B = keep_BT[:, t].bool()
        next_value_B = torch.where(kept_B, values_BT[:, t], next_value_B)
        next_advantage_B = torch.where(kept_B, advantage_B, next_advantage_B)
    return advantages_BT, (advantages_BT + values_BT) * keep_BT


def whiten(values_BT: torch.Tensor, mask_BT: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """(x − mean) / (σ + eps) over kept tokens (population σ); masked positions become 0.

    Example:
        >>> whiten(torch.tensor([[1.0, 3.0, 9.0]]), torch.tensor([[1, 1, 0]]))
        tensor([[-1.,  1.,  0.]])
    """
    keep_BT = mask_BT.bool()
    kept = values_BT[keep_BT]
    if kept.numel() == 0:
        return torch.zeros_like(values_BT)
    mean, std = kept.mean(), kept.std(unbiased=False)
    return torch.where(keep_BT, (values_BT - mean) / (std + eps), torch.zeros_like(values_BT))


def value_loss(
    values_BT: torch.Tensor,
    old_values_BT: torch.Tensor,
    returns_BT: torch.Tensor,
    mask_BT: torch.Tensor,
    *,
    clip: float = 0.2,
    num_tokens: int | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO's clipped value loss, averaged over kept tokens:

    L = ½ · Σ_t max((V_t − R_t)², (V_old,t + clip(V_t − V_old,t, −c, c) − R_t)²) / N,

    the pessimistic (larger) of the plain and the clipped squared error, c = ``clip``
    (Schulman et al. 2017's PPO2 code; Ouyang et al. 2022). ``clip`` ≤ 0 turns the clip off.
    N is ``num_tokens`` (pass the whole batch's under gradient accumulation, so micro-batch
    losses add up to the batch's) or the kept tokens here. Stats: ``value_clip_frac``
    (tokens where the clipped term is the larger), ``value_mean``, ``return_mean``.

    Example: V_old = 0, V = 1, R = 2, c = 0.2 → max((1 − 2)², (0.2 − 2)²)/2 = 1.62:
        >>> value_loss(torch.ones(1, 1), torch.zeros(1, 1), torch.full((1, 1), 2.0),
        ...     torch.ones(1, 1))[0]
        tensor(1.6200)
    """
    keep_BT = mask_BT.to(values_BT.dtype)
    unclipped_BT = (values_BT - returns_BT) ** 2
    if clip > 0:
        clipped_values_BT = old_values_BT + (values_BT - old_values_BT).clamp(-clip, clip)
        clipped_BT = (clipped_values_BT - returns_BT) ** 2
        per_token_BT = torch.maximum(unclipped_BT, clipped_BT)
    else:
        clipped_BT = unclipped_BT
        per_token_BT = unclipped_BT
    denominator = num_tokens if num_tokens is not None else int(keep_BT.sum())
    loss = 0.5 * (per_token_BT * keep_BT).sum() / max(denominator, 1)
    with torch.no_grad():
        kept = keep_BT.bool()
        count = kept.sum().clamp(min=1)
        stats = {
            "value_clip_frac": ((clipped_BT > unclipped_BT) & kept).sum() / count,
            "value_mean": (values_BT * keep_BT).sum() / count,
            "return_mean": (returns_BT * keep_BT).sum() / count,
        }
    return loss, stats
