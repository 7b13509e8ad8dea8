"""PPO's value model: the policy's transformer body with a scalar head (no LM head)."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from grpo.models.gguf_cache import cached_gguf_model
from grpo.models.gguf_loading import dequantized_gguf
from grpo.models.loading import DTYPES, TrainableSpec, lora_config, turn_off_dropout
from grpo.models.logprobs import positions_from_mask
from grpo.models.names import model_name


class ValueModel(nn.Module):
    """A transformer body and a scalar head: one value per position, shape (B, L)."""

    def __init__(self, body: nn.Module, hidden_size: int) -> None:
        super().__init__()
        self.body = body
        self.head = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor
    ) -> torch.Tensor:
        hidden_BLH = self.body(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=False,
        ).last_hidden_state
        return self.head(hidden_BLH.to(self.head.weight.dtype)).squeeze(-1)


def load_value_model(path: str, device: torch.device, spec: TrainableSpec) -> ValueModel:
    """The body of the model at ``path`` (LoRA-adapted with ``spec.lora``) and a
    zero-initialised head: V starts at 0."""
    from transformers import AutoModel

    name = model_name(path, "model.path")
    if name.kind == "gguf":
        dtype = DTYPES[spec.dtype]
        causal_lm = cached_gguf_model(
            Path(name.location), dtype, lambda: dequantized_gguf(name, dtype)
        )
        body = causal_lm.get_decoder()  # the LM head dropped
    else:
        where, options = name.pretrained()
        body = AutoModel.from_pretrained(where, dtype=DTYPES[spec.dtype], **options)
    if spec.disable_dropout:
        turn_off_dropout(body)
    if spec.gradient_checkpointing:
        body.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if spec.lora is not None:
        from peft import get_peft_model

        body = get_peft_model(body, lora_config(spec.lora))
        if spec.gradient_checkpointing:
            body.enable_input_require_grads()
    hidden_size = body.config.get_text_config().hidden_size
    model = ValueModel(body, hidden_size).to(device=device, dtype=DTYPES[spec.dtype])
    model.train()
    return model


def completion_values(
    model: ValueModel,
    prompt_ids_BP: torch.Tensor,
    prompt_mask_BP: torch.Tensor,
    completion_ids_BT: torch.Tensor,
    completion_mask_BT: torch.Tensor,
    attention_mask_BT: torch.Tensor | None = None,
) -> torch.Tensor:
    """V at each completion token's state (the position whose logits predict it), (B, T).

    ``attention_mask_BT`` (multi-turn rollouts): every real completion-column token, the
    inserted ones included, which the critic must see as the policy does; None: the
    completion mask. Values come back at every column: the caller masks the inserted ones.
    """
    real_mask_BT = completion_mask_BT if attention_mask_BT is None else attention_mask_BT
    input_ids_BL = torch.cat([prompt_ids_BP, completion_ids_BT], dim=1)
    attention_mask_BL = torch.cat([prompt_mask_BP, real_mask_BT], dim=1)
    values_BL = model(input_ids_BL, attention_mask_BL, positions_from_mask(attention_mask_BL))
    prompt_width, completion_width = prompt_ids_BP.shape[1], completion_ids_BT.shape[1]
    return values_BL[:, prompt_width - 1 : prompt_width - 1 + completion_width].float()
