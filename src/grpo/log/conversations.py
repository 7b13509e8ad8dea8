"""What completions.jsonl holds beyond the texts (:mod:`grpo.log.samples` shows it).

An agent run's rows carry the conversation as the model lived it: ``rendered_prompt`` (the
prompt as the model read it, special tokens kept), ``conversation`` (every message with its
``role``, ``content`` and ``author``: dataset, system, environment, model, tool or grpo;
a tool message also has its ``name``) and ``turn_tokens`` (per model turn: [tokens
sampled, tokens inserted after it]). With ``train.log_token_ids`` every row, single-turn
too, also holds the ids trained on, padding left out: ``prompt_ids``, ``completion_ids``
(the model's tokens and the inserted ones, in order) and ``model_mask`` (1 on the model's
tokens: the ``completion_mask_BT`` the loss uses).
"""

from __future__ import annotations

from typing import Any

from grpo.rollout.engine import Rollout

AGENT_COLUMNS = ("rendered_prompt", "conversation", "turn_tokens")


def agent_fields(columns: dict[str, list[Any]], rows: int) -> list[dict[str, Any]]:
    """Per row, the agent columns the producer gave (none for a single-turn run)."""
    present = [name for name in AGENT_COLUMNS if name in columns]
    return [{name: columns[name][row] for name in present} for row in range(rows)]


def token_id_fields(rollout: Rollout) -> list[dict[str, list[int]]]:
    """Per row, the ids the update trains on with the padding taken out: the prompt's, the
    completion columns' (inserted tokens included) and the model-token mask over them."""
    prompt_ids_BP, prompt_real_BP = rollout.prompt_ids_BP.cpu(), rollout.prompt_mask_BP.cpu()
    ids_BT, real_BT = rollout.completion_ids_BT.cpu(), rollout.real_mask_BT.cpu().bool()
    model_BT = rollout.completion_mask_BT.cpu()
    return [
        {
            "prompt_ids": prompt_ids_BP[b][prompt_real_BP[b].bool()].tolist(),
            "completion_ids": ids_BT[b][real_BT[b]].tolist(),
            "model_mask": model_BT[b][real_BT[b]].tolist(),
        }
        for b in range(ids_BT.shape[0])
    ]


def message_label(message: dict[str, Any]) -> str:
    """Who wrote a message, then its role where that says more: "model (assistant)",
    "tool add", "environment (user)"."""
    author, role = str(message.get("author", message.get("role", "?"))), message.get("role", "")
    name = f" {message['name']}" if message.get("name") else ""
    return f"{author}{name}" + (f" ({role})" if role and role != author else "")


def transcript(row: dict[str, Any]) -> str:
    """A row's conversation as plain text, each message labelled with its author (the
    completion alone for a single-turn row): the tables sent to TensorBoard and trackers."""
    if "conversation" not in row:
        return row["completion"]
    return "\n".join(f"[{message_label(m)}] {m.get('content', '')}" for m in row["conversation"])
