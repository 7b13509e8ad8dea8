"""vLLM rollouts (GPU only, the ``vllm`` extra): :class:`RolloutEngine` on ``vllm.LLM``.

Colocated: each training process hosts its own vLLM engine on its own GPU, next to the
policy, taking ``rollout.vllm_gpu_memory_utilization`` of the GPU. With
``rollout.vllm_sleep`` the engine sleeps between rollouts (level 1: its weights are
offloaded to CPU memory and its KV cache freed), so the update gets the memory back.
After every optimizer step the trainer pushes the policy's weights (:meth:`sync_weights`).

Sampling is vLLM's own, one request per row, seeded with a base seed drawn from the
trainer's generator plus the row's index in the step: a row's completion does not depend
on how the rows are split across processes. The sampled tokens' log-probs come back as
vLLM's sampler computed them (``processed_logprobs`` where the installed vLLM offers it:
after temperature and top-k/top-p). The trainer recomputes its own log-probs for the
ratio; the sampler's only weight the loss through ``algorithm.sampler_correction`` (TIS by
default with this engine), and their mean gap is logged as ``sampler_logp_gap``.

Multi-turn rollouts (``[agent]``) go turn by turn through :meth:`VLLMEngine.start_turns`
(:mod:`grpo.rollout.vllm_turns`): each turn resubmits every row's ids so far.

Nothing here runs without a CUDA GPU and vLLM; the helpers that turn vLLM's requests and
outputs into this project's layout are plain functions (:mod:`grpo.rollout.vllm_io`),
tested on CPU.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import Any

import torch
from torch import nn

from grpo.algo.groups import group_of
from grpo.rollout.engine import (
    Rollout,
    RolloutEngine,
    RolloutRequest,
    left_pad,
)
from grpo.rollout.turns import TurnEngine, TurnSession
from grpo.rollout.vllm_io import Completion, completion_from_output, request_params
from grpo.rollout.vllm_turns import VLLMTurnSession

INSTALL_HINT = (
    "rollout.engine = 'vllm' needs vLLM and a CUDA GPU: pip install 'grpo[vllm]' "
    "(or use rollout.engine = 'transformers', which runs anywhere)"
)


def import_vllm() -> ModuleType:
    """The ``vllm`` module, or an ImportError saying what to install (and that a GPU is needed)."""
    try:
        import vllm
    except ImportError as error:
        raise ImportError(f"{INSTALL_HINT} ({error})") from None
    if not torch.cuda.is_available():
        raise RuntimeError(f"{INSTALL_HINT}: no CUDA device is visible")
    return vllm


# --- pure helpers (no vLLM needed) -----------------------------------------------------


def assemble_rollout(
    prompts_B: Sequence[list[int]],
    completions_B: Sequence[Completion],
    pad_token_id: int,
    device: torch.device,
) -> Rollout:
    """Rows of (prompt, completion) → a :class:`Rollout`: prompts left-padded, completions
    right-padded, masks 1 on real tokens (EOS included), log-probs 0 on padding."""
    prompt_ids_BP, prompt_mask_BP = left_pad(list(prompts_B), pad_token_id)
    width = max(1, max(len(c.token_ids) for c in completions_B))
    rows = len(completions_B)
    completion_ids_BT = torch.full((rows, width), pad_token_id, dtype=torch.long)
    completion_mask_BT = torch.zeros((rows, width), dtype=torch.long)
    sampler_logp_BT = torch.zeros((rows, width), dtype=torch.float32)
    for row, completion in enumerate(completions_B):
        length = len(completion.token_ids)
        if length:
            completion_ids_BT[row, :length] = torch.tensor(completion.token_ids)
            completion_mask_BT[row, :length] = 1
            sampler_logp_BT[row, :length] = torch.tensor(completion.logprobs)
    return Rollout(
        prompt_ids_BP=prompt_ids_BP,
        prompt_mask_BP=prompt_mask_BP,
        completion_ids_BT=completion_ids_BT,
        completion_mask_BT=completion_mask_BT,
        sampler_logp_BT=sampler_logp_BT,
        stopped_B=torch.tensor([c.stopped for c in completions_B], dtype=torch.bool),
    ).to(device)


def hf_weights(model: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """The policy's weights under the Hugging Face names vLLM's ``load_weights`` expects.

    DDP's wrapper is looked through; FSDP2 shards are gathered (``full_tensor``, a
    collective: every process must iterate); LoRA adapters are merged into the base
    weights while iterating and unmerged after, and their own tensors are skipped.
    Consume the iterator fully, copying each tensor before asking for the next: the
    tensors share storage with the model (merged LoRA weights change back at the end).
    """
    while isinstance(getattr(model, "module", None), nn.Module):  # DDP
        model = model.module
    peft = hasattr(model, "merge_adapter") and hasattr(model, "peft_config")
    if peft:
        model.merge_adapter()
    try:
        for name, tensor in model.state_dict().items():
            if peft:
                if "lora_" in name or "original_module" in name:
                    continue
                name = name.removeprefix("base_model.model.").replace(".base_layer", "")
                name = name.replace("modules_to_save.default.", "")
            if hasattr(tensor, "full_tensor"):
                tensor = tensor.full_tensor()
            yield name, tensor.detach()
    finally:
        if peft:
            model.unmerge_adapter()


def context_length(
    max_prompt_tokens: int,
    max_new_tokens: int,
    *,
    max_turns: int | None = None,
    max_tool_response_tokens: int = 0,
) -> int:
    """vLLM's ``max_model_len`` when ``rollout.vllm_max_model_len`` is 0: the prompt and a
    completion; multi-turn (``max_turns`` set, ``[agent]``), ``max_turns`` turns, each a
    completion, a tool result of at most ``max_tool_response_tokens`` and 64 tokens of the
    chat template's markers."""
    if max_turns is None:
        return max_prompt_tokens + max_new_tokens
    return max_prompt_tokens + max_turns * (max_new_tokens + max_tool_response_tokens + 64)


# --- the engine ------------------------------------------------------------------------


class VLLMEngine(RolloutEngine, TurnEngine):
    """:class:`grpo.rollout.engine.RolloutEngine` on a colocated ``vllm.LLM``; also a
    :class:`~grpo.rollout.turns.TurnEngine` for multi-turn rollouts
    (:mod:`grpo.rollout.vllm_turns`)."""

    def __init__(
        self,
        model_path: str,
        *,
        tokenizer_path: str,
        pad_token_id: int,
        eos_token_ids: set[int],
        device: torch.device,
        dtype: str = "bfloat16",
        gpu_memory_utilization: float = 0.3,
        max_model_len: int = 2048,
        sleep: bool = True,
        enforce_eager: bool = False,
        seed: int = 0,
        revision: str | None = None,
        tokenizer_revision: str | None = None,
        load_format: str = "auto",
    ) -> None:
        """``model_path`` and ``tokenizer_path``: folders or Hub ids (with their revisions);
        ``load_format = "dummy"``: random weights, for the caller to sync its own into."""
        vllm = import_vllm()
        self.pad_token_id = pad_token_id
        self.eos_token_ids = eos_token_ids
        self._device = device
        self.sleep_between_rollouts = sleep
        self._asleep = False
        _launcher_environment()
        arguments: dict[str, Any] = {
            "model": model_path,
            "tokenizer": tokenizer_path,
            "revision": revision,
            "tokenizer_revision": tokenizer_revision,
            "load_format": load_format,
            "dtype": dtype,
            "gpu_memory_utilization": gpu_memory_utilization,
            "max_model_len": max_model_len,
            "enable_sleep_mode": sleep,
            "enforce_eager": enforce_eager,
            "seed": seed,
            "enable_prefix_caching": True,  # the G rows of a prompt share its prefill
            # In this process, on this process's GPU (torchrun's environment), so the
            # policy's weights can be handed over without a copy through another process.
            "distributed_executor_backend": "external_launcher",
            "max_num_batched_tokens": max(4096, max_model_len),
            # Log-probs of the distribution actually sampled (temperature, top-k/top-p).
            "logprobs_mode": "processed_logprobs",
        }
        try:
            self.llm = vllm.LLM(**arguments)
        except TypeError as error:  # an older vLLM without logprobs_mode: raw log-probs
            if "logprobs_mode" not in str(error):
                raise
            del arguments["logprobs_mode"]
            self.llm = vllm.LLM(**arguments)
        self.sampling_params = vllm.SamplingParams

    @property
    def device(self) -> torch.device:
        """Where rollouts' tensors go: the trainer's device (vLLM keeps its own memory)."""
        return self._device

    def generate_rows(self, request: RolloutRequest) -> Rollout:
        params, generator, group_size = request.params, request.generator, request.group_size
        start, stop = request.start, request.stop
        # One draw per step from the shared generator, whatever `rows` is: every process
        # draws the same base seed, and row b is seeded base + b.
        device = generator.device if generator is not None else None
        base = int(torch.randint(0, 2**31 - 1, (1,), generator=generator, device=device))
        prompts_B = [
            request.prompt_token_ids[group_of(row, group_size)] for row in range(start, stop)
        ]
        requests = [
            self.sampling_params(
                **request_params(
                    params, self.eos_token_ids, None if params.temperature == 0 else base + row
                )
            )
            for row in range(start, stop)
        ]
        self.wake()
        outputs = self.llm.generate(
            [{"prompt_token_ids": ids} for ids in prompts_B],
            sampling_params=requests,
            use_tqdm=False,
        )
        self.rest()
        completions_B = [completion_from_output(output.outputs[0]) for output in outputs]
        return assemble_rollout(prompts_B, completions_B, self.pad_token_id, self.device)

    def start_turns(self, request: RolloutRequest, max_model_tokens: int) -> TurnSession:
        """Multi-turn rows: each turn resubmits every row's ids so far (the prefix cache
        reuses what it computed), see :mod:`grpo.rollout.vllm_turns`."""
        return VLLMTurnSession(self, request, max_model_tokens)

    def sync_weights(self, model: nn.Module) -> None:
        """Load ``model``'s current weights into vLLM (under FSDP: call on every process).

        The engine stays awake afterwards: the next thing it does is the next rollout.
        """
        self.wake()
        target = _vllm_model(self.llm)
        for name, tensor in hf_weights(model):  # one tensor at a time: no second full copy
            target.load_weights([(name, tensor)])
        self.llm.reset_prefix_cache()  # cached prefixes were computed with the old weights

    def wake(self) -> None:
        if self._asleep:
            torch.cuda.empty_cache()
            self.llm.wake_up()
            self._asleep = False

    def rest(self) -> None:
        """After a rollout: sleep (level 1) when ``sleep``, so the update gets the memory."""
        if self.sleep_between_rollouts:
            self.llm.sleep(level=1)
            self._asleep = True


def _vllm_model(llm: Any) -> nn.Module:  # vllm.LLM, whose insides move across versions
    """The ``nn.Module`` inside an in-process vLLM engine (its path moved across versions)."""
    candidates = (
        lambda: llm.llm_engine.model_executor.driver_worker.model_runner.model,
        lambda: llm.llm_engine.model_executor.driver_worker.worker.model_runner.model,
        lambda: (
            llm.llm_engine.engine_core.engine_core.model_executor.driver_worker.worker.model_runner.model
        ),
    )
    for candidate in candidates:
        try:
            return candidate()
        except AttributeError:
            continue
    raise RuntimeError(
        "cannot reach the model inside this vLLM version's engine to load weights into it; "
        "please report the vLLM version"
    )


def _launcher_environment() -> None:
    """vLLM's external_launcher reads torchrun's variables; a lone process gets its own."""
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("LOCAL_RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if "MASTER_PORT" not in os.environ:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(probe.getsockname()[1])
