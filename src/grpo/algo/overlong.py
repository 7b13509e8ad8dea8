"""DAPO's overlong reward shaping (pure).

Yu et al. 2025 (DAPO, "soft overlong punishment", Eq. 13): with L_max the length cap and
a buffer of L_cache tokens before it, a completion of |y| tokens gets

    R_length(y) = 0                                      if |y| ≤ L_max − L_cache
                = −penalty · (|y| − (L_max − L_cache)) / L_cache   inside the buffer
                = −penalty                               if |y| ≥ L_max

added to its reward, so the policy learns to finish before the cap instead of every long
answer scoring like a wrong one. DAPO uses penalty = 1 (verl's
``overlong_buffer.penalty_factor``; TRL's ``get_soft_overlong_punishment``).

Multi-turn trajectories (``grpo.agents``): the cap is per turn (``rollout.max_new_tokens``,
a turn cut there ends the trajectory), so |y| is the trajectory's longest model turn,
:func:`longest_run` of its model-token mask: the tokens that tools and the environment
inserted between turns neither count nor join two turns into one.
"""

from __future__ import annotations

import torch


def overlong_penalty(
    lengths_B: torch.Tensor, max_length: int, buffer: int, penalty: float = 1.0
) -> torch.Tensor:
    """The (≤ 0) reward term R_length per completion (float32, B); zeros when buffer = 0.

    Example (cap 10, buffer 4: free up to 6 tokens, then −1/4 per token, −1 at the cap):
        >>> overlong_penalty(torch.tensor([5, 6, 7, 8, 10, 12]), max_length=10, buffer=4)
        tensor([ 0.0000,  0.0000, -0.2500, -0.5000, -1.0000, -1.0000])
    """
    lengths_B = lengths_B.to(torch.float32)
    if buffer <= 0:
        return torch.zeros_like(lengths_B)
    start = max_length - buffer
    over_B = ((lengths_B - start) / buffer).clamp(min=0.0, max=1.0)
    return 0.0 - penalty * over_B  # +0.0 (not −0.0) before the buffer


def longest_run(mask_BT: torch.Tensor) -> torch.Tensor:
    """Per row, the length of its longest run of consecutive kept (1) positions (int64, B).

    With c_t = Σ_{s≤t} m_s and z_t the largest c_s at a masked position s ≤ t (0 if none),
    a run ending at t has c_t − z_t kept positions; the row's value is max_t (c_t − z_t).
    On a multi-turn completion mask (model tokens 1, inserted ones 0) it is the longest turn.

    Example (turns of 2 and 3 model tokens around 2 inserted ones; an empty row):
        >>> longest_run(torch.tensor([[1, 1, 0, 0, 1, 1, 1, 0], [0, 0, 0, 0, 0, 0, 0, 0]]))
        tensor([3, 0])
    """
    kept_BT = mask_BT.long()
    count_BT = kept_BT.cumsum(dim=1)
    if count_BT.shape[1] == 0:
        return torch.zeros(mask_BT.shape[0], dtype=torch.long, device=mask_BT.device)
    base_BT = torch.where(kept_BT == 0, count_BT, 0).cummax(dim=1).values
    return (count_BT - base_BT).max(dim=1).values
