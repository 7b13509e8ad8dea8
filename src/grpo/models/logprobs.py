"""Per-token log-probabilities of completion tokens under a causal LM (tensor in, tensor out).

Layout shared with the rollout: each row is ``[prompt left-padded to P][completion
right-padded to T]``, so every completion starts at column P and only the last T + 1
positions are scored: never P·V logits, and by default not even B·T·V at once (chunks).
"""

from __future__ import annotations

import torch
from torch import nn

from grpo.models.compiled_trunk import compile_decoder, training_decoder
from grpo.models.shared_prompt import prompt_groups, shared_prompt_outputs, sharing_blocker
from grpo.models.wrappers import base_model, is_fsdp_sharded


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


# The chunked path holds at most this many logits at once (rows × vocabulary; 128 MiB in fp32).
LOGITS_CHUNK_ELEMENTS = 32 * 1024 * 1024


def _chunks(total: int, size: int) -> list[slice]:
    return [slice(start, min(start + size, total)) for start in range(0, total, size)]


class _ChunkedLinearLogprobs(torch.autograd.Function):
    """log softmax(h Wᵀ / τ)[y] for F rows of hidden states, ``chunk_rows`` × V logits at a time.

    With g the incoming gradient, z = h Wᵀ / τ and p = softmax(z): ∂z = g·(onehot(y) − p),
    ∂h = (∂z / τ) W and ∂W = (∂z / τ)ᵀ h, the exact gradient. When all F rows fit in one
    chunk, p is kept for backward (≤ ``chunk_rows`` × V floats); otherwise only h, W and each
    row's logsumexp are kept and backward recomputes each chunk's logits (one more matmul),
    so no (F, V) tensor is ever stored. Entropy H comes from the forward's logits; with
    ``entropy_grad`` it is differentiable too: ∂H/∂z = −p ⊙ (log p + H), added to ∂z in the
    same chunked backward (an entropy bonus then costs no full-vocabulary tensor either).
    """

    @staticmethod
    def forward(
        ctx, hidden_FH, weight_VH, tokens_F, temperature, chunk_rows, with_entropy, entropy_grad
    ):
        rows_total = hidden_FH.shape[0]
        keep_probs = rows_total <= chunk_rows and any(ctx.needs_input_grad[:2])
        logp_F = torch.empty(rows_total, dtype=torch.float32, device=hidden_FH.device)
        lse_F = torch.empty_like(logp_F)
        entropy_F = torch.zeros_like(logp_F)
        probs_CV = None
        for rows in _chunks(rows_total, chunk_rows):
            logits_CV = (hidden_FH[rows] @ weight_VH.T).float()
            if temperature != 1.0:
                logits_CV /= temperature
            lse_F[rows] = torch.logsumexp(logits_CV, dim=-1)
            logp_F[rows] = logits_CV.gather(1, tokens_F[rows, None]).squeeze(1) - lse_F[rows]
            if with_entropy or keep_probs:
                probs_CV = (logits_CV - lse_F[rows, None]).exp_()
            if with_entropy:  # H = logsumexp(z) − Σ p z
                entropy_F[rows] = lse_F[rows] - (probs_CV * logits_CV).sum(dim=-1)
        kept_FV = probs_CV if keep_probs else None
        ctx.save_for_backward(hidden_FH, weight_VH, tokens_F, lse_F, kept_FV, entropy_F)
        ctx.temperature, ctx.chunk_rows = temperature, chunk_rows
        ctx.entropy_grad = entropy_grad and with_entropy
        if not ctx.entropy_grad:
            ctx.mark_non_differentiable(entropy_F)
        return logp_F, entropy_F

    @staticmethod
    def backward(ctx, grad_F, grad_entropy_F):
        hidden_FH, weight_VH, tokens_F, lse_F, probs_FV, entropy_F = ctx.saved_tensors
        grad_H_F = grad_entropy_F.float() if ctx.entropy_grad else None
        grad_hidden_FH = torch.empty_like(hidden_FH) if ctx.needs_input_grad[0] else None
        grad_weight_VH = torch.zeros_like(weight_VH) if ctx.needs_input_grad[1] else None
        grad_F = grad_F.float()
        for rows in _chunks(hidden_FH.shape[0], ctx.chunk_rows):
            h_CH = hidden_FH[rows]
            if probs_FV is not None:  # the single chunk's p, kept by forward
                probs_CV = probs_FV
            else:
                probs_CV = (h_CH @ weight_VH.T).float()
                if ctx.temperature != 1.0:
                    probs_CV /= ctx.temperature
                probs_CV = probs_CV.sub_(lse_F[rows, None]).exp_()
            # ∂z = g·(onehot − p); in place unless p is the kept one (a second backward reuses it).
            scale_C1 = -grad_F[rows, None]
            if grad_H_F is not None:  # + g_H·∂H/∂z = −g_H·(p log p + H·p)
                p_log_p_CV = torch.special.xlogy(probs_CV, probs_CV)
                scale_C1 = scale_C1 - (grad_H_F * entropy_F)[rows, None]
            grad_CV = probs_CV * scale_C1 if probs_FV is not None else probs_CV.mul_(scale_C1)
            if grad_H_F is not None:
                grad_CV -= grad_H_F[rows, None] * p_log_p_CV
            grad_CV.scatter_add_(1, tokens_F[rows, None], grad_F[rows, None])
            if ctx.temperature != 1.0:
                grad_CV /= ctx.temperature
            grad_CV = grad_CV.to(hidden_FH.dtype)
            if grad_hidden_FH is not None:
                grad_hidden_FH[rows] = grad_CV @ weight_VH
            if grad_weight_VH is not None:
                grad_weight_VH.addmm_(grad_CV.T, h_CH)
        return grad_hidden_FH, grad_weight_VH, None, None, None, None, None


def chunked_token_logprobs(
    hidden_FH: torch.Tensor,
    weight_VH: torch.Tensor,
    tokens_F: torch.Tensor,
    *,
    temperature: float = 1.0,
    chunk_rows: int | None = None,
    with_entropy: bool = False,
    entropy_grad: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log softmax(h Wᵀ / τ)[y] per row (F,), never holding more than ``chunk_rows`` × V logits.

    The values of :func:`token_logprobs` on the full logits h Wᵀ / τ, with exact gradients
    for ``hidden_FH`` and ``weight_VH``. ``chunk_rows`` defaults to
    :data:`LOGITS_CHUNK_ELEMENTS` // V. Entropy (F,) is returned when asked, without
    gradient unless ``entropy_grad``.
    """
    chunk_rows = chunk_rows or max(LOGITS_CHUNK_ELEMENTS // weight_VH.shape[0], 1)
    logp_F, entropy_F = _ChunkedLinearLogprobs.apply(
        hidden_FH, weight_VH, tokens_F, float(temperature), chunk_rows, with_entropy, entropy_grad
    )
    return logp_F, entropy_F if with_entropy else None


def _chunkable_head(model: nn.Module) -> tuple[nn.Module, nn.Linear] | None:
    """(decoder, lm_head) when logits are exactly lm_head(decoder(...)), else None.

    DDP and FSDP must see the whole model's forward (gradient hooks, parameter gathering),
    and some architectures scale or soft-cap their logits: those take the full-logits path.
    """
    if hasattr(model, "module") or is_fsdp_sharded(model):
        return None
    inner = base_model(model)
    get_decoder = getattr(inner, "get_decoder", None)
    head = inner.get_output_embeddings() if hasattr(inner, "get_output_embeddings") else None
    config = getattr(inner, "config", None)
    scaled = any(
        getattr(config, name, None) not in (None, 1, 1.0)
        for name in ("final_logit_softcapping", "logit_scale", "logits_scaling")
    )
    if get_decoder is None or type(head) is not nn.Linear or head.bias is not None or scaled:
        return None
    return get_decoder(), head


def compile_training_passes(model: nn.Module) -> bool:
    """``train.compile``: the training passes on ``model`` run its decoder compiled
    (:mod:`grpo.models.compiled_trunk`); False where they take the full-logits path (DDP,
    FSDP, scaled logits), which stays eager."""
    parts = _chunkable_head(model)
    if parts is not None:
        compile_decoder(parts[0])
    return parts is not None


def _completion_outputs(
    module: nn.Module,
    inputs: dict[str, torch.Tensor],
    prompt_width: int,
    groups: tuple[torch.Tensor, torch.Tensor] | None,
    *,
    logits: bool,
) -> torch.Tensor:
    """The (B, T, ·) outputs at positions P − 1 + t, each predicting completion token t:
    ``module``'s logits or (a decoder's) last hidden states; with ``groups``, each prompt run
    once per group (:func:`~grpo.models.shared_prompt.shared_prompt_outputs`)."""
    ids_BL, mask_BL, positions_BL = (
        inputs[k] for k in ("input_ids", "attention_mask", "position_ids")
    )
    if groups is not None:
        return shared_prompt_outputs(
            module, ids_BL, mask_BL, positions_BL, prompt_width, groups, logits=logits
        )
    completion_length = ids_BL.shape[1] - prompt_width
    if logits:
        return module(**inputs, logits_to_keep=completion_length + 1).logits[:, :-1, :]
    return module(**inputs).last_hidden_state[:, -completion_length - 1 : -1]


def completion_logprobs(
    model: nn.Module,
    prompt_ids_BP: torch.Tensor,
    prompt_mask_BP: torch.Tensor,
    completion_ids_BT: torch.Tensor,
    completion_mask_BT: torch.Tensor,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
    chunked: bool = True,
    entropy_grad: bool = False,
    attention_mask_BT: torch.Tensor | None = None,
    share_prompt: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log π(y_t | x, y_<t) at temperature τ for every completion position, shape (B, T).

    The policy the loss optimises is softmax(logits / τ), the distribution the rollout
    sampled from, so the ratio is 1 on-policy. Entropy (B, T) is returned when asked,
    without gradient unless ``entropy_grad`` (an entropy bonus in the loss).

    ``chunked`` (when the model allows it, see :func:`_chunkable_head`): the decoder's hidden
    states go through the LM head a chunk of completion tokens at a time
    (:func:`chunked_token_logprobs`), so logits memory stays bounded whatever B × T × V is;
    padding positions are not scored and read 0. Otherwise the model's full-vocabulary logits
    for the B × (T + 1) kept positions are materialised.

    ``attention_mask_BT`` (multi-turn rollouts): the completion columns' real tokens, the
    environment's inserted ones included; the model attends to all of them, while only
    ``completion_mask_BT``'s (the model's own tokens) are scored. None: the same mask.

    ``share_prompt``: neighbouring rows with the same prompt (a group) run it once
    (:mod:`grpo.models.shared_prompt`); the same values and gradients up to floating-point
    reassociation. Where the model cannot (:func:`~grpo.models.shared_prompt.sharing_blocker`)
    every row runs its own prompt, as without it.
    """
    input_ids_BL = torch.cat([prompt_ids_BP, completion_ids_BT], dim=1)
    real_mask_BT = completion_mask_BT if attention_mask_BT is None else attention_mask_BT
    attention_mask_BL = torch.cat([prompt_mask_BP, real_mask_BT], dim=1)
    inputs = {
        "input_ids": input_ids_BL,
        "attention_mask": attention_mask_BL,
        "position_ids": positions_from_mask(attention_mask_BL),
        "use_cache": False,
    }
    parts = _chunkable_head(model) if chunked else None
    groups = None
    if share_prompt and sharing_blocker(model) is None:
        groups = prompt_groups(prompt_ids_BP, prompt_mask_BP)
    prompt_width = prompt_ids_BP.shape[1]
    scoring = {"temperature": temperature, "with_entropy": with_entropy}
    if parts is not None:
        decoder, head = parts
        decoder = training_decoder(decoder)  # compiled under train.compile
        hidden_BTH = _completion_outputs(decoder, inputs, prompt_width, groups, logits=False)
        return _score_hidden(
            hidden_BTH, head, completion_ids_BT, completion_mask_BT, entropy_grad, **scoring
        )
    logits_BTV = _completion_outputs(model, inputs, prompt_width, groups, logits=True)
    return _score_logits(logits_BTV, completion_ids_BT, entropy_grad, **scoring)


def _score_hidden(
    hidden_BTH: torch.Tensor,
    head: nn.Linear,
    completion_ids_BT: torch.Tensor,
    completion_mask_BT: torch.Tensor,
    entropy_grad: bool,
    *,
    temperature: float,
    with_entropy: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (and entropy) of the real tokens through the LM head a chunk at a time;
    padding positions are not scored and read 0."""
    keep_BT = completion_mask_BT.bool()
    logp_F, entropy_F = chunked_token_logprobs(
        hidden_BTH[keep_BT],
        head.weight,
        completion_ids_BT[keep_BT],
        temperature=temperature,
        with_entropy=with_entropy,
        entropy_grad=entropy_grad,
    )
    logp_BT = logp_F.new_zeros(completion_ids_BT.shape).masked_scatter(keep_BT, logp_F)
    entropy_BT = None
    if entropy_F is not None:
        entropy_BT = entropy_F.new_zeros(completion_ids_BT.shape).masked_scatter(keep_BT, entropy_F)
    return logp_BT, entropy_BT


def _score_logits(
    logits_BTV: torch.Tensor,
    completion_ids_BT: torch.Tensor,
    entropy_grad: bool,
    *,
    temperature: float,
    with_entropy: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (and entropy) from materialised full-vocabulary logits at temperature τ."""
    if temperature != 1.0:
        logits_BTV = logits_BTV / temperature
    logp_BT = token_logprobs(logits_BTV, completion_ids_BT)
    entropy_BT = None
    if with_entropy:
        with torch.enable_grad() if entropy_grad else torch.no_grad():
            entropy_BT = entropy_from_logits(logits_BTV)
    return logp_BT, entropy_BT
