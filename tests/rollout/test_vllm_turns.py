"""The vLLM engine's turn-by-turn interface (:mod:`grpo.rollout.vllm_turns`) on CPU.

The stand-in for ``vllm.LLM`` runs the real tiny model underneath: each request decodes its
``prompt_token_ids`` token by token, greedy or sampled from its seed, and returns the
sampled tokens' log-probs. Multi-turn rollouts on it (an environment answering every turn)
submit each row's whole id sequence every turn, train on exactly those ids, match the
built-in engine greedily, and do not depend on how the rows are split.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, ClassVar

import pytest
import torch

from grpo.agents.chat import ChatFormat
from grpo.agents.trajectories import AgentSettings, run_trajectories
from grpo.models.logprobs import completion_logprobs
from grpo.rollout.engine import RolloutRequest, SamplingParams
from tests.agents.helpers import Echo


class ModelLLM:
    """``vllm.LLM`` on a real model (no cache: the whole sequence at every token)."""

    instances: ClassVar[list[ModelLLM]] = []

    def __init__(self, **arguments: Any) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.arguments = arguments
        self.model = AutoModelForCausalLM.from_pretrained(arguments["model"]).eval()
        self.tokenizer = AutoTokenizer.from_pretrained(arguments["tokenizer"])
        self.calls: list[str] = []
        self.submitted: list[list[list[int]]] = []  # per generate call: each request's ids
        self.seeds: list[int | None] = []  # every request's
        runner = SimpleNamespace(model=SimpleNamespace(load_weights=self._load))
        self.llm_engine = SimpleNamespace(
            model_executor=SimpleNamespace(driver_worker=SimpleNamespace(model_runner=runner))
        )
        ModelLLM.instances.append(self)

    @torch.no_grad()
    def _load(self, weights: list[tuple[str, torch.Tensor]]) -> None:
        state = self.model.state_dict()
        for name, tensor in weights:
            state[name].copy_(tensor)

    def generate(self, prompts: list[dict], sampling_params: list, use_tqdm: bool = True):
        self.calls.append("generate")
        self.submitted.append([list(p["prompt_token_ids"]) for p in prompts])
        self.seeds += [request.seed for request in sampling_params]
        return [
            SimpleNamespace(outputs=[self._decode(list(p["prompt_token_ids"]), request)])
            for p, request in zip(prompts, sampling_params, strict=True)
        ]

    @torch.no_grad()
    def _decode(self, ids: list[int], request: Any) -> SimpleNamespace:
        seeded = None if request.seed is None else torch.Generator().manual_seed(request.seed)
        tokens: list[int] = []
        entries: list[dict] = []
        finish = "length"
        for _ in range(request.max_tokens):
            logits = self.model(torch.tensor([ids + tokens])).logits[0, -1].float()
            if request.temperature == 0:
                logp = torch.log_softmax(logits, dim=-1)
                token = int(logp.argmax())
            else:
                logp = torch.log_softmax(logits / request.temperature, dim=-1)
                token = int(torch.multinomial(logp.exp(), 1, generator=seeded))
            tokens.append(token)
            entries.append({token: SimpleNamespace(logprob=float(logp[token]))})
            text = self.tokenizer.decode(tokens, skip_special_tokens=True)
            if token in request.stop_token_ids or any(s in text for s in request.stop or ()):
                finish = "stop"
                break
        return SimpleNamespace(token_ids=tokens, logprobs=entries, finish_reason=finish)

    def sleep(self, level: int) -> None:
        self.calls.append(f"sleep{level}")

    def wake_up(self) -> None:
        self.calls.append("wake")

    def reset_prefix_cache(self) -> None:
        self.calls.append("reset")


RECORDS = [{"prompt": "12+3="}, {"prompt": "7*8="}, {"prompt": "9-4="}]
STOPS = tuple("abcdefghijklmnop")  # most turns end after a few tokens: rows take 3 turns


def _vllm_engine(install_vllm, model_dir: Any, tokenizer: Any):
    from grpo.rollout.vllm_engine import VLLMEngine

    install_vllm(ModelLLM)
    return VLLMEngine(
        str(model_dir),
        tokenizer_path=str(model_dir),
        pad_token_id=tokenizer.pad_token_id,
        eos_token_ids={tokenizer.eos_token_id},
        device=torch.device("cpu"),
    )


def _roll(engine: Any, tokenizer: Any, params: SamplingParams, rows: range, seed: int = 3):
    settings = AgentSettings(chat=ChatFormat(tokenizer, []), environment=Echo, max_turns=3)
    generator = torch.Generator().manual_seed(seed)
    return run_trajectories(engine, RECORDS, 2, params, generator, rows, settings)


def _trainer_logprobs(policy: Any, rollout: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """The trainer's log-probs of a rollout's tokens, and the mask of the model's tokens."""
    logp_BT, _ = completion_logprobs(
        policy,
        rollout.prompt_ids_BP,
        rollout.prompt_mask_BP,
        rollout.completion_ids_BT,
        rollout.completion_mask_BT,
        attention_mask_BT=rollout.attention_mask_BT,
    )
    return logp_BT, rollout.completion_mask_BT.bool()


@pytest.fixture
def tokenizer():
    from grpo.demo.tokenizer import build_char_tokenizer

    return build_char_tokenizer()


def test_each_turn_submits_the_whole_sequence_and_trains_on_it(
    install_vllm, tiny_model_dir, tokenizer
) -> None:
    from transformers import AutoModelForCausalLM

    engine = _vllm_engine(install_vllm, tiny_model_dir, tokenizer)
    params = SamplingParams(temperature=1.0, max_new_tokens=6, stop_strings=STOPS)
    result = _roll(engine, tokenizer, params, range(6))
    llm = engine.llm
    assert llm.calls == ["generate"] * 3 + ["sleep1"]  # one call a turn, asleep after
    assert len(llm.submitted[2]) >= 1  # some row took three turns
    rollout = result.rollout
    # Turn k's request for a row is its prompt plus everything before turn k, and the
    # trained ids are that plus what turn k sampled: nothing re-rendered.
    for row in range(6):
        prompt = rollout.prompt_ids_BP[row][rollout.prompt_mask_BP[row].bool()].tolist()
        ids = rollout.completion_ids_BT[row][rollout.attention_mask_BT[row].bool()].tolist()
        model = rollout.completion_mask_BT[row].tolist()
        starts = [i for i in range(len(ids)) if model[i] and (i == 0 or not model[i - 1])]
        submitted = [request for call in llm.submitted for request in call]
        for start in starts:
            assert prompt + ids[:start] in submitted, (row, start)
    assert sum(len(call) for call in llm.submitted) == sum(
        sum(m["role"] == "assistant" for m in c) for c in result.conversations
    )
    assert result.metrics["agent/prefix_breaks"] == 0.0  # the session's ids, checked each turn
    # The sampler's log-probs are the trainer's on the assembled trajectory.
    policy = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    logp_BT, scored = _trainer_logprobs(policy, rollout)
    torch.testing.assert_close(logp_BT[scored], rollout.sampler_logp_BT[scored], atol=1e-4, rtol=0)


def test_greedy_turns_match_the_built_in_engine(install_vllm, tiny_model_dir, tokenizer) -> None:
    from transformers import AutoModelForCausalLM

    from grpo.rollout.hf_engine import TransformersEngine

    params = SamplingParams(temperature=0.0, max_new_tokens=6, stop_strings=STOPS)
    on_vllm = _roll(
        _vllm_engine(install_vllm, tiny_model_dir, tokenizer), tokenizer, params, range(6)
    )
    built_in = TransformersEngine(
        AutoModelForCausalLM.from_pretrained(tiny_model_dir),
        pad_token_id=tokenizer.pad_token_id,
        eos_token_ids={tokenizer.eos_token_id},
        decode=lambda ids: tokenizer.decode(ids, skip_special_tokens=True),
    )
    local = _roll(built_in, tokenizer, params, range(6))
    assert on_vllm.conversations == local.conversations
    for field in ("completion_ids_BT", "completion_mask_BT", "attention_mask_BT", "stopped_B"):
        assert torch.equal(getattr(on_vllm.rollout, field), getattr(local.rollout, field)), field


def test_a_row_samples_the_same_turns_whatever_the_split(
    install_vllm, tiny_model_dir, tokenizer
) -> None:
    engine = _vllm_engine(install_vllm, tiny_model_dir, tokenizer)
    params = SamplingParams(temperature=1.0, max_new_tokens=6, stop_strings=STOPS)
    whole = _roll(engine, tokenizer, params, range(6))
    whole_seeds = list(engine.llm.seeds)
    halves = [_roll(engine, tokenizer, params, rows) for rows in (range(0, 3), range(3, 6))]
    assert halves[0].conversations + halves[1].conversations == whole.conversations
    # Prompt 1's group is split between the halves; its rows still sample as in the whole.
    for field in ("completion_ids_BT", "completion_mask_BT", "sampler_logp_BT"):
        whole_BT, parts = getattr(whole.rollout, field), [getattr(h.rollout, field) for h in halves]
        for row in range(6):
            part = parts[row // 3][row % 3]
            width = min(part.shape[0], whole_BT.shape[1])
            assert torch.equal(part[:width], whole_BT[row, :width]), (field, row)
    # Every (row, turn) has its own seed, the same in the whole and in the halves.
    assert len(set(whole_seeds)) == len(whole_seeds)
    assert sorted(engine.llm.seeds[len(whole_seeds) :]) == sorted(whole_seeds)


def test_the_session_stops_at_the_model_token_budget(
    install_vllm, tiny_model_dir, tokenizer
) -> None:
    engine = _vllm_engine(install_vllm, tiny_model_dir, tokenizer)
    prompt = tokenizer("12+3=")["input_ids"]
    params = SamplingParams(temperature=1.0, max_new_tokens=4)
    request = RolloutRequest([prompt], 2, params, torch.Generator().manual_seed(0), 0, 2)
    session = engine.start_turns(request, max_model_tokens=6)
    first = session.generate([0, 1], [[], []], [4, 4])
    assert [len(o.token_ids) for o in first] == [4, 4] and not first[0].stopped
    second = session.generate([1], [[5, 6]], [4])  # 2 model tokens left of 6
    assert len(second[0].token_ids) == 2
    assert engine.llm.submitted[1] == [prompt + first[1].token_ids + [5, 6]]
    third = session.generate([1], [[7]], [4])  # none left: nothing sampled, no request
    assert third[0].token_ids == [] and not third[0].stopped
    assert len(engine.llm.submitted) == 2
    with pytest.raises(ValueError, match="increasing subset"):
        session.generate([0], [[]], [4])  # row 0 was dropped
    session.close()
    assert engine.llm.calls[-1] == "sleep1"


def test_the_trainer_rolls_out_multi_turn_on_vllm(
    install_vllm, tiny_model_dir, arithmetic_jsonl, tmp_path
) -> None:
    """2 steps of an [agent] run with rollout.engine = 'vllm' (the stand-in on the real
    model, weights pushed after each update): its log-probs are the trainer's."""
    from grpo.config import load_config
    from grpo.rewards.runner import RewardFunction
    from grpo.training.loop import train

    install_vllm(ModelLLM)
    config = load_config(
        None,
        [
            f"model.path='{tiny_model_dir}'",
            "model.device='cpu'",
            f"data.train_path='{arithmetic_jsonl}'",
            f"agent.environment='{__name__}:Echo'",
            "agent.max_turns=3",
            "rollout.engine='vllm'",
            "rollout.group_size=2",
            "rollout.max_new_tokens=5",
            f"rollout.stop_strings={list(STOPS)}",
            "train.steps=2",
            "train.prompts_per_step=2",
            f"train.run_dir='{tmp_path / 'run'}'",
            "train.progress=false",
            "train.tensorboard=false",
        ],
    )

    def varied(prompts, completions, **_):
        return [float(len(set(c))) for c in completions]

    result = train(config, reward_functions=[RewardFunction("varied", varied)], verbose=False)
    assert all(row["agent/turns/mean"] > 1 for row in result.history)
    trained = [row for row in result.history if row.get("groups_trained", 0) > 0]
    assert trained
    # Sampler and trainer see the same weights and the same ids: no log-prob gap.
    assert all(row["sampler_logp_gap"] < 1e-4 for row in result.history)
    llm = ModelLLM.instances[-1]
    assert llm.calls.count("reset") == len(trained)  # weights pushed after each update
    assert sum(1 for call in llm.calls if call == "generate") >= 2 * 2  # ≥ 2 turns a step


def test_real_vllm_turns_score_as_the_trainer(tmp_path) -> None:
    """On a GPU with vLLM: 3-turn rollouts whose sampler log-probs are the trainer's."""
    pytest.importorskip("vllm")
    if not torch.cuda.is_available():
        pytest.skip("vLLM rollouts need a CUDA GPU")
    from transformers import AutoModelForCausalLM

    from grpo.demo.model import build_tiny_llama
    from grpo.demo.tokenizer import build_char_tokenizer
    from grpo.rollout.vllm_engine import VLLMEngine

    tokenizer = build_char_tokenizer(tmp_path)
    build_tiny_llama(tokenizer, hidden_size=256, layers=2, heads=4, directory=tmp_path)
    engine = VLLMEngine(
        str(tmp_path),
        tokenizer_path=str(tmp_path),
        pad_token_id=tokenizer.pad_token_id,
        eos_token_ids={tokenizer.eos_token_id},
        device=torch.device("cuda"),
        dtype="float32",
        gpu_memory_utilization=0.2,
        max_model_len=256,
    )
    params = SamplingParams(temperature=1.0, max_new_tokens=6, stop_strings=STOPS)
    rollout = _roll(engine, tokenizer, params, range(6)).rollout
    assert (rollout.attention_mask_BT - rollout.completion_mask_BT).sum() > 0  # inserted ids
    policy = AutoModelForCausalLM.from_pretrained(tmp_path).cuda()
    logp_BT, scored = _trainer_logprobs(policy, rollout)
    gap = (logp_BT[scored] - rollout.sampler_logp_BT[scored]).abs().mean()
    assert gap < 1e-2, f"sampler vs trainer log-prob gap {gap:.2e} over 3 turns"


def test_vllm_context_length_makes_room_for_every_turn() -> None:
    from grpo.rollout.vllm_engine import context_length

    assert context_length(100, 20) == 120
    multi = context_length(100, 20, max_turns=3, max_tool_response_tokens=50)
    assert multi == 100 + 3 * (20 + 50 + 64)  # 502
