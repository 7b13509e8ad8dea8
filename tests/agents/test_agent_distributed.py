"""Multi-turn rollouts over several processes: a 2-process run is the 1-process run, each
process creating only its own rows' environments (whose randomness is seeded per row).

In process: a block of rows (what one process rolls out) has exactly the ids, masks and
sampler log-probs of the same rows of the whole batch, wherever the block is cut (a group
split between blocks included). End to end: real ``torchrun --nproc_per_node 2`` jobs on
an environment + tools config give the conversations, rewards, metrics (``agent/*``
included) and weights of the 1-process run after 2 steps.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from grpo.agents.chat import ChatFormat
from grpo.agents.parser import parse_xml_json
from grpo.agents.tools import tool_schema
from grpo.agents.trajectories import AgentSettings, run_trajectories
from grpo.rollout.engine import SamplingParams
from grpo.training.loop import reduce_over_processes

from .conftest import ascii_tokenizer
from .helpers import Echo
from .test_agent_eval import PromptScripted, mul

MODULE = """
import json, os, random

DIGITS = set("0123456789")


class DigitGame:
    def __init__(self, row):
        dump = os.environ.get("GRPO_TEST_DUMP")
        if dump:  # each process counts the environments it makes
            with open(dump + ".created." + os.environ.get("RANK", "0"), "a") as handle:
                handle.write(row["prompt"] + "\\n")
        # Its randomness is its own, seeded by the row, as docs/agents.md says to.
        self.prompt, self.said, self.rng = row["prompt"], "", random.Random(row["prompt"])

    def reset(self):
        return [{"role": "user", "content": self.prompt}]

    def step(self, text):
        first = not self.said
        self.said += text
        if first:
            return f"More digits! ({self.rng.randint(1, 9)})", None, False
        return None, sum(c in DIGITS for c in self.said) / max(len(self.said), 1), True


def add(a: int, b: int) -> int:
    \"\"\"Add two integers.\"\"\"
    return a + b


def turns(prompts, completions, conversation, **_):
    rewards = [float(sum(m["role"] == "assistant" for m in c)) for c in conversation]
    path = os.environ.get("GRPO_TEST_DUMP")
    if path:
        with open(f"{path}.{os.environ.get('RANK', '0')}", "a") as handle:
            record = {"conversation": conversation, "completions": completions, "turns": rewards}
            handle.write(json.dumps(record) + "\\n")
    return rewards
"""

STOP_STRINGS = ("a", "e", "i", "o", "u", "1", "2", "3", "4", "5", " ")  # turns end early


def _run(gloo_jobs, model_dir: Path, data: Path, processes: int, name: str, *extra: str):
    config = gloo_jobs.tmp_path / "grpo.toml"
    config.write_text(f'[model]\npath = "{model_dir}"\n')
    overrides = [
        f"--data.train_path={data}",
        "--agent.environment=agent_env:DigitGame",
        "--agent.tools=['agent_env:add']",
        "--agent.max_turns=3",
        "--rewards=[{function='agent_env:turns', weight=0.0}]",
        "--rollout.group_size=2",
        "--rollout.max_new_tokens=5",
        f"--rollout.stop_strings={list(STOP_STRINGS)}",
        "--algorithm.beta=0.04",
        "--optim.lr=1e-3",  # Adam at 1e-2 turns float-order noise into 1e-5
        "--train.steps=2",
        "--train.prompts_per_step=3",  # 6 rows, 3 per process: prompt 1's group is split
        "--train.sequences_per_micro_batch=2",
        "--train.progress=false",
        "--train.tensorboard=false",
        *extra,
    ]
    result = gloo_jobs.run(processes, name, config, *overrides)
    assert result.returncode == 0, result.stderr[-4000:]
    return result


@pytest.mark.parametrize(
    "extra",
    [
        (),
        # Refilled rounds (dynamic sampling) and a LoRA adapter, still a split group.
        pytest.param(
            (
                "--algorithm.dynamic_sampling=true",
                "--algorithm.max_generation_rounds=3",
                "--model.lora_rank=4",
            ),
            marks=pytest.mark.slow,
        ),
    ],
    ids=["plain", "dynamic-sampling-lora"],
)
@pytest.mark.slow  # two torchrun jobs and two plain ones: about 40 s on a busy machine
def test_two_processes_roll_out_and_train_multi_turn_as_one(
    ascii_model_dir, gloo_jobs, extra: tuple[str, ...]
) -> None:
    from safetensors.torch import load_file

    tmp_path = gloo_jobs.tmp_path
    (tmp_path / "agent_env.py").write_text(MODULE)
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"Say {n}{n}"}) + "\n" for n in range(6)))
    _run(gloo_jobs, ascii_model_dir, data, 1, "one", *extra)
    two = _run(gloo_jobs, ascii_model_dir, data, 2, "two", *extra)
    assert "2 processes × " in two.stdout
    single, double = gloo_jobs.steps("one", 1), gloo_jobs.steps("two", 2)
    assert len(single) >= 2 and double == single  # every conversation and reward, row for row
    if not extra:  # each process creates the environments of its own rows' prompts only:
        # 2 steps × 3 prompts in 1 process; of 2, those of the 2 prompts each one's 3 rows
        # touch (prompt 1's group is split): 4 each, not 6
        assert _created(tmp_path, "one") == [6]
        assert _created(tmp_path, "two") == [4, 4]
    assert max(t for step in single for t in step["turns"]) > 1  # the rows went multi-turn
    metrics = gloo_jobs.assert_same_run("one", "two")  # metrics (agent/* too), weights
    assert "agent/env_token_frac" in metrics[0]
    if extra:  # some step refilled
        assert sum(row["generation_rounds"] for row in metrics) == len(single) > 2
    initial = load_file(ascii_model_dir / "model.safetensors")
    trained = load_file(tmp_path / "one" / "final" / "model.safetensors")
    assert any(not torch.equal(initial[name], trained[name]) for name in initial)


def _created(tmp_path: Path, name: str) -> list[int]:
    """Environments each process of job ``name`` created."""
    files = sorted(tmp_path.glob(f"{name}.dump.created.*"))
    return [len(path.read_text().splitlines()) for path in files]


def test_a_block_of_rows_rolls_out_as_in_the_whole_batch(ascii_model_dir) -> None:
    """3 prompts × G = 2 with an environment: blocks [0, 3) and [3, 6) (prompt 1's group
    split) have the whole batch's ids, masks and log-probs row for row."""
    from transformers import AutoModelForCausalLM

    from grpo.rollout.hf_engine import TransformersEngine

    tokenizer = ascii_tokenizer()
    engine = TransformersEngine(
        AutoModelForCausalLM.from_pretrained(ascii_model_dir),
        pad_token_id=tokenizer.pad_token_id,
        eos_token_ids={tokenizer.eos_token_id},
        decode=lambda ids: tokenizer.decode(ids, skip_special_tokens=True),
    )
    settings = AgentSettings(
        chat=ChatFormat(tokenizer, [tool_schema(_add)]),
        tools={"add": _add},
        parser=parse_xml_json,
        environment=Echo,
        max_turns=3,
    )
    records = [{"prompt": f"Say {n}"} for n in range(3)]
    params = SamplingParams(temperature=1.0, max_new_tokens=5, stop_strings=STOP_STRINGS)

    def rollout(rows: range):
        generator = torch.Generator().manual_seed(5)
        return run_trajectories(engine, records, 2, params, generator, rows, settings)

    whole = rollout(range(6))
    assert whole.metrics["agent/turns/mean"] > 1
    for rows in (range(0, 3), range(3, 6)):
        block = rollout(rows)
        assert block.conversations == whole.conversations[rows.start : rows.stop]
        for own, row in enumerate(rows):
            width = int(whole.rollout.attention_mask_BT[row].sum())
            assert int(block.rollout.attention_mask_BT[own].sum()) == width
            for field in ("completion_ids_BT", "completion_mask_BT", "sampler_logp_BT"):
                mine = getattr(block.rollout, field)[own, :width]
                theirs = getattr(whole.rollout, field)[row, :width]
                assert torch.allclose(mine.float(), theirs.float(), atol=1e-5), (field, row)
            assert block.rollout.stopped_B[own] == whole.rollout.stopped_B[row]
        assert block.metrics["agent/turns/mean"] == pytest.approx(
            sum(len([m for m in c if m["role"] == "assistant"]) for c in block.conversations) / 3
        )


def _add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def test_agent_metrics_of_two_blocks_reduce_to_the_whole_batch() -> None:
    """3 prompts × G = 2 split into blocks [0, 3) and [3, 6) (prompt 1's group split):
    each process's agent metrics, reduced as the trainer reduces them, are the whole
    batch's. Hand count: rows 0-1 write broken JSON, rows 2-3 call an unknown tool (each
    then says "done": 2 turns), rows 4-5 answer at once (1 turn, no call)."""
    tokenizer = ascii_tokenizer()
    settings = AgentSettings(
        chat=ChatFormat(tokenizer, [tool_schema(mul)]),
        tools={"mul": mul},
        parser=parse_xml_json,
        max_turns=3,
    )
    records = [{"prompt": prompt} for prompt in ("5*5", "2*3", "9*9")]
    params = SamplingParams(temperature=0.0, max_new_tokens=80)

    def rollout(rows: range):
        return run_trajectories(PromptScripted(tokenizer), records, 2, params, None, rows, settings)

    whole, blocks = rollout(range(6)), [rollout(range(0, 3)), rollout(range(3, 6))]
    dist = SimpleNamespace(
        enabled=True,
        gather_values=lambda metrics: {k: [b.metrics[k] for b in blocks] for k in metrics},
    )
    reduced = reduce_over_processes(dist, blocks[0].metrics)
    expected = {
        "agent/malformed_json/errors": 2.0,
        "agent/unknown_tool/errors": 2.0,
        "agent/tool_calls/mean": 4 / 6,
        "agent/tool_call_frac": 4 / 6,
        "agent/turns/mean": (4 * 2 + 2 * 1) / 6,
        "agent/cut_at_max_turns_frac": 0.0,
    }
    for key, value in expected.items():
        assert whole.metrics[key] == pytest.approx(value), key
    for key, value in whole.metrics.items():
        if key not in ("agent/tool/seconds", "agent/env_token_frac"):  # see step_metrics
            assert reduced[key] == pytest.approx(value), key
