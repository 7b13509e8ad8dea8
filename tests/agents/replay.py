"""A tiny Llama with SmolLM2's vocabulary that replays scripted multi-turn traces through the
real engine, so the exact ids it samples are known: some of them on purpose not the ids its
tokenizer gives their text (re-encoding drift), and one whose last token runs past a stop
string.

Trained on the traces until every scripted token has probability ≥ 0.99 (greedy decoding
and, nearly always, sampling at temperature 1 replay them). Only the output rows of the
tokens the traces use are trained, with the rest of the vocabulary held at logit 0 in the
softmax (those rows are zero and stay so): the exact full-vocabulary loss at a fraction of
its cost, about a second on a CPU.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from grpo.agents.chat import ChatFormat
from grpo.agents.tools import tool_schema
from grpo.demo.tools_task import mul

CALL = '<tool_call>{{"name": "mul", "arguments": {{"a": {a}, "b": {b}}}}}</tool_call>'
TOOL_END = "</tool_call>"  # the stop string of the tests that use one


@dataclass(frozen=True)
class Script:
    """What the model does on one prompt: a mul call, then the product as its answer."""

    a: int
    b: int
    split_mul: bool  # "mul" sampled as "m" + "ul": its text encodes to one token
    stop_inside: bool  # the call's last token is ">." (">" then "."), past TOOL_END's end

    @property
    def prompt(self) -> str:
        return f"What is {self.a}*{self.b}?"

    @property
    def answer(self) -> str:
        return str(self.a * self.b)

    @property
    def call_text(self) -> str:
        return CALL.format(a=self.a, b=self.b) + ("." if self.stop_inside else "")


SCRIPTS = (Script(12, 34, split_mul=True, stop_inside=False), Script(5, 6, False, True))


def smollm2_chat(tokenizer: Any) -> ChatFormat:
    return ChatFormat(tokenizer, [tool_schema(mul)])


def call_ids(script: Script, chat: ChatFormat) -> list[int]:
    """The call's ids as the model samples them, before its end-of-turn token."""
    ids = chat.encode(script.call_text)
    if script.split_mul:
        (whole,) = chat.encode("mul")
        at = ids.index(whole)
        ids = ids[:at] + chat.encode("m") + chat.encode("ul") + ids[at + 1 :]
    return ids


def trace(script: Script, chat: ChatFormat) -> tuple[list[int], list[int]]:
    """(ids, mask): the prompt, the call and its end-of-turn, the tool's message as the
    template inserts it, the answer and its end-of-turn; 1 on the model's ids."""
    eos = chat.tokenizer.eos_token_id
    tool = [{"role": "tool", "name": "mul", "content": script.answer}]
    parts = [
        (chat.prompt_ids([{"role": "user", "content": script.prompt}]), 0),
        ([*call_ids(script, chat), eos], 1),
        (chat.insertion_ids(tool), 0),
        ([*chat.encode(script.answer), eos], 1),
    ]
    return [i for ids, _ in parts for i in ids], [flag for ids, flag in parts for _ in ids]


def build_replaying_llama(tokenizer: Any, directory: Path, seed: int = 0) -> Any:
    """The model (saved in ``directory`` with the tokenizer and a prompts.jsonl of the
    scripts' prompts and answers), trained on :data:`SCRIPTS`."""
    from transformers import LlamaConfig, LlamaForCausalLM

    chat = smollm2_chat(tokenizer)
    traces = [trace(script, chat) for script in SCRIPTS]
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = LlamaForCausalLM(config)
    _replay_training(model, traces, tokenizer.pad_token_id)
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(directory), safe_serialization=True)
    tokenizer.save_pretrained(str(directory))
    rows = [{"prompt": s.prompt, "answer": s.answer} for s in SCRIPTS]
    (directory / "prompts.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return model


def _replay_training(model: Any, traces: list[tuple[list[int], list[int]]], pad: int) -> None:
    width = max(len(ids) for ids, _ in traces)
    ids_BL = torch.full((len(traces), width), pad)
    real_BL = torch.zeros((len(traces), width), dtype=torch.long)
    train_BL = torch.zeros((len(traces), width), dtype=torch.bool)
    for row, (ids, mask) in enumerate(traces):
        ids_BL[row, : len(ids)] = torch.tensor(ids)
        real_BL[row, : len(ids)] = 1
        train_BL[row, : len(mask)] = torch.tensor(mask, dtype=torch.bool)
    target_BL, train_BL = ids_BL[:, 1:], train_BL[:, 1:]
    used = sorted(set(target_BL[train_BL].tolist()))
    column_BL = torch.tensor([[used.index(t) if t in used else 0 for t in r] for r in target_BL])
    head = torch.nn.Parameter(torch.zeros(len(used), model.config.hidden_size))
    model.model.embed_tokens.weight.requires_grad_(False)  # random, distinct: enough
    trained = [p for p in model.model.parameters() if p.requires_grad] + [head]
    optimizer = torch.optim.Adam(trained, lr=1e-2)
    rest = math.log(model.config.vocab_size - len(used))  # every other token: logit 0
    for _ in range(600):
        hidden = model.model(input_ids=ids_BL, attention_mask=real_BL).last_hidden_state
        logits_BLU = hidden[:, :-1] @ head.T
        others = torch.full((*logits_BLU.shape[:-1], 1), rest)
        norm_BL = torch.logsumexp(torch.cat([logits_BLU, others], dim=-1), dim=-1)
        logp_BL = logits_BLU.gather(-1, column_BL[..., None])[..., 0] - norm_BL
        loss = -logp_BL[train_BL].mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if logp_BL[train_BL].min().item() > math.log(0.99):
            break
    else:
        raise AssertionError(f"the traces were not learnt (loss {loss.item():.3g})")
    with torch.no_grad():
        model.lm_head.weight.zero_()
        model.lm_head.weight[used] = head
    model.model.embed_tokens.weight.requires_grad_(True)
    model.eval()
