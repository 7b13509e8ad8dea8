"""[agent] with what it used to refuse: PPO's critic, FSDP, the overlong shaping and
``data.chat_template``, each on real runs of the tiny model."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from tests.user_code.user_rewards import digit_fraction

from .test_agent_distributed import STOP_STRINGS
from .test_agent_training import DigitGame, add, assistant_turns

CHAT_TEMPLATE = (
    "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}"
    "{% if m['role'] == 'assistant' %}{{ eos_token }}{% endif %}{% endfor %}"
    "{% if tools %}[{{ tools | length }} tools]{% endif %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)


def _data(tmp_path: Path) -> Path:
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"Say {n}{n}"}) + "\n" for n in range(4)))
    return data


AGENT_SETTINGS = (  # over tiny_config's
    f"agent.environment='{DigitGame.__module__}:DigitGame'",
    f"agent.tools=['{add.__module__}:add']",
    "agent.max_turns=3",
    f"rewards=[{{ function = '{assistant_turns.__module__}:assistant_turns' }}]",
    "rollout.group_size=2",
    "rollout.max_new_tokens=5",
    f"rollout.stop_strings={list(STOP_STRINGS)}",
    "train.prompts_per_step=2",
    "train.sequences_per_micro_batch=3",
    "train.tensorboard=false",
)


def test_multi_turn_ppo_trains_policy_and_critic(tiny_config, ascii_model_dir, tmp_path) -> None:
    from safetensors.torch import load_file

    from grpo.training.loop import train

    config = tiny_config(
        *AGENT_SETTINGS,
        "algorithm.estimator='ppo'",
        model=ascii_model_dir,
        data=_data(tmp_path),
    )
    result = train(config, verbose=False)
    assert len(result.history) == 2
    assert result.history[-1]["agent/turns/mean"] > 1  # the rows went multi-turn
    assert 0 < result.history[-1]["agent/env_token_frac"] < 1
    for row in result.history:
        for key in ("loss", "value_loss", "critic_grad_norm", "explained_variance"):
            assert math.isfinite(row[key]), key
    # V starts at 0 and the return is the reward (turns, 1 to 3) on every model token.
    assert result.history[0]["value_mean"] == 0.0
    assert result.history[0]["return_mean"] >= 1.0
    initial = load_file(ascii_model_dir / "model.safetensors")
    trained = load_file(Path(result.final_dir) / "model.safetensors")
    assert any(not torch.equal(initial[name], trained[name]) for name in initial)


def test_the_critic_sees_inserted_tokens_as_the_policy_does(ascii_model_dir) -> None:
    """V at each column is the value model's output at that state of the real sequence
    (inserted tokens attended to), not of the model tokens alone."""
    from grpo.models.loading import TrainableSpec
    from grpo.models.value import completion_values, load_value_model

    model = load_value_model(
        str(ascii_model_dir), torch.device("cpu"), TrainableSpec("float32", True, False, None)
    )
    torch.nn.init.normal_(model.head.weight, generator=torch.Generator().manual_seed(0))
    model.eval()
    prompt_BP, prompt_mask_BP = torch.tensor([[5, 6, 7]]), torch.ones(1, 3, dtype=torch.long)
    ids_BT = torch.tensor([[10, 11, 40, 41, 12, 0]])
    model_BT = torch.tensor([[1, 1, 0, 0, 1, 0]])  # model, model, inserted × 2, model, padding
    real_BT = torch.tensor([[1, 1, 1, 1, 1, 0]])
    with torch.no_grad():
        values_BT = completion_values(model, prompt_BP, prompt_mask_BP, ids_BT, model_BT, real_BT)
        whole_BL = torch.tensor([[5, 6, 7, 10, 11, 40, 41, 12]])
        plain_BL = model(whole_BL, torch.ones_like(whole_BL), torch.arange(8)[None])
    # Column t's state is the sequence up to the token before it: positions 2..6.
    torch.testing.assert_close(values_BT[0, :5], plain_BL[0, 2:7].float())


# Prompt "Say n" takes 1 + n % 3 turns: the rows of one process may all end their
# trajectories while the other process's rows go on for more turns.
LOCKSTEP_MODULE = """
import json, os


class Countdown:
    def __init__(self, row):
        self.left = 1 + int(row["prompt"].split()[-1]) % 3

    def reset(self):
        return [{"role": "user", "content": "Count"}]

    def step(self, text):
        self.left -= 1
        return (None, float(len(text)), True) if self.left == 0 else ("Again.", None, False)


def turns(prompts, completions, conversation, **_):
    rewards = [float(sum(m["role"] == "assistant" for m in c)) for c in conversation]
    with open(f"{os.environ['GRPO_TEST_DUMP']}.{os.environ.get('RANK', '0')}", "a") as handle:
        handle.write(json.dumps({"turns": rewards, "completions": completions}) + "\\n")
    return rewards
"""


@pytest.mark.slow  # a 1-process job and a 2-process torchrun job: about 30 s on a busy machine
def test_fsdp_multi_turn_trains_as_one_process(ascii_model_dir, gloo_jobs) -> None:
    """2 processes under FSDP, decoding turns in lockstep (a process whose rows ended joins
    the other's forward passes), roll out and train as 1 process does."""
    tmp_path = gloo_jobs.tmp_path
    (tmp_path / "countdown.py").write_text(LOCKSTEP_MODULE)
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"Say {n}"}) + "\n" for n in range(6)))
    config = tmp_path / "grpo.toml"
    config.write_text(f'[model]\npath = "{ascii_model_dir}"\n')
    overrides = [
        f"--data.train_path={data}",
        "--agent.environment=countdown:Countdown",
        "--agent.max_turns=3",
        "--rewards=[{function='countdown:turns', weight=0.0}]",
        "--rollout.group_size=2",
        "--data.shuffle=false",  # step 1: rank 0 has prompts 0, 1 (1, 2 turns), rank 1 1, 2 (3)
        "--rollout.max_new_tokens=24",  # turns end on a stop string, rarely cut
        f"--rollout.stop_strings={list(STOP_STRINGS)}",
        "--algorithm.beta=0.04",
        "--optim.lr=1e-3",
        "--train.steps=2",
        "--train.prompts_per_step=3",  # 6 rows, 3 per process
        "--train.sequences_per_micro_batch=2",
        "--train.progress=false",
        "--train.tensorboard=false",
    ]
    for processes, name, extra in ((1, "one", []), (2, "fsdp", ["--distributed.strategy=fsdp"])):
        result = gloo_jobs.run(processes, name, config, *overrides, *extra)
        assert result.returncode == 0, result.stderr[-4000:]
    assert "2 processes (fsdp)" in result.stdout
    single, double = gloo_jobs.steps("one", 1), gloo_jobs.steps("fsdp", 2)
    assert len(single) == 2 and double == single  # every trajectory and reward, row for row
    # The processes ran different numbers of turns (rows 0-2 against rows 3-5).
    assert max(single[0]["turns"][:3]) < max(single[0]["turns"][3:]), single
    metrics = gloo_jobs.assert_same_run("one", "fsdp")  # metrics and final weights
    assert "agent/env_token_frac" in metrics[0]


@pytest.fixture
def templated_model_dir(ascii_model_dir, tmp_path) -> Path:
    """The ASCII model with a chat template of its own on its tokenizer."""
    import shutil

    from transformers import AutoTokenizer

    directory = tmp_path / "templated"
    shutil.copytree(ascii_model_dir, directory)
    tokenizer = AutoTokenizer.from_pretrained(directory)
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(directory)
    return directory


TEMPLATE_SETTINGS = (  # over tiny_config's
    "data.chat_template=true",
    "data.system_prompt='Be brief.'",
    f"agent.tools=['{add.__module__}:add']",
    "agent.max_turns=2",
    f"rewards=[{{ function = '{digit_fraction.__module__}:digit_fraction' }}]",
    "rollout.group_size=2",
    "rollout.max_new_tokens=5",
    "train.prompts_per_step=2",
    "train.tensorboard=false",
)


def test_chat_template_renders_the_agent_conversation(
    tiny_config, templated_model_dir, tmp_path
) -> None:
    """The prompt ids are the template's rendering of the system prompt and the dataset's
    prompt as the user's message, with the tools offered, once (not a template inside a
    template); the run trains."""
    from transformers import AutoTokenizer

    from grpo.agents.tools import tool_schema
    from grpo.config import batch_plan
    from grpo.runtime.distributed import Dist
    from grpo.training.loop import train
    from grpo.training.setup import set_up

    config = tiny_config(*TEMPLATE_SETTINGS, model=templated_model_dir, data=_data(tmp_path))
    run = set_up(config, batch_plan(config, 1), Dist(), torch.device("cpu"), None, False)
    assert run.dataset.prompts[:2] == ["Say 00", "Say 11"]
    produced = run.maker.producer.produce([0, 1], 2, slice(0, 4))
    tokenizer = AutoTokenizer.from_pretrained(templated_model_dir)
    for row, prompt in enumerate(["Say 00", "Say 00", "Say 11", "Say 11"]):
        messages = [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": prompt},
        ]
        expected = tokenizer.apply_chat_template(
            messages, tools=[tool_schema(add)], add_generation_prompt=True, tokenize=False
        )
        assert expected == f"<system>Be brief.<user>{prompt}[1 tools]<assistant>"
        rollout = produced.local_rollout
        ids = rollout.prompt_ids_BP[row][rollout.prompt_mask_BP[row].bool()]
        assert ids.tolist() == tokenizer(expected, add_special_tokens=False)["input_ids"]
    history = train(config, verbose=False).history
    assert len(history) == 2 and any(row["groups_trained"] > 0 for row in history)
    assert all(math.isfinite(row["loss"]) for row in history if row["groups_trained"])


def test_chat_template_without_a_template_on_the_tokenizer_is_a_data_error(
    tiny_config, ascii_model_dir, tmp_path
) -> None:
    from grpo.data.files import DataError
    from grpo.training.loop import train

    config = tiny_config(*TEMPLATE_SETTINGS, model=ascii_model_dir, data=_data(tmp_path))
    with pytest.raises(DataError, match="the tokenizer has no chat template"):
        train(config, verbose=False)
