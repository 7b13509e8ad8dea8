"""The vLLM rollout engine: its helpers and plumbing on CPU; the engine itself on a GPU.

The helpers (sampling parameters, vLLM outputs → Rollout, the weights pushed to vLLM)
need neither vLLM nor a GPU and always run, and so do the engine's and the trainer's
plumbing against a stand-in for ``vllm`` (per-row seeds, sleep/wake, weight pushes). The
test on real vLLM needs it and a CUDA GPU and is skipped cleanly without them
(`pip install 'grpo[vllm]'` on a CUDA machine to run it).
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import ClassVar

import pytest
import torch

from grpo.rollout.engine import SamplingParams
from grpo.rollout.vllm_engine import (
    Completion,
    assemble_rollout,
    completion_from_output,
    hf_weights,
    import_vllm,
    request_params,
)


def test_request_params_map_the_sampling_settings() -> None:
    params = SamplingParams(temperature=0.7, top_p=0.9, top_k=0, max_new_tokens=12)
    request = request_params(params, {5, 2}, seed=17)
    assert request["n"] == 1 and request["seed"] == 17
    assert request["temperature"] == 0.7 and request["top_p"] == 0.9
    assert request["top_k"] == -1  # vLLM's "off"
    assert request["max_tokens"] == 12 and request["stop"] is None
    assert request["stop_token_ids"] == [2, 5]
    assert request["logprobs"] == 0  # the sampled token's log-prob only
    with_stops = request_params(SamplingParams(top_k=8, stop_strings=("\n",)), {2}, seed=None)
    assert with_stops["top_k"] == 8 and with_stops["stop"] == ["\n"]


def _output(tokens: list[int], logprobs: list[float], finish_reason: str) -> SimpleNamespace:
    entries = [
        {token: SimpleNamespace(logprob=value, rank=1)}
        for token, value in zip(tokens, logprobs, strict=True)
    ]
    return SimpleNamespace(token_ids=tokens, logprobs=entries, finish_reason=finish_reason)


def test_outputs_become_a_rollout_in_the_shared_layout() -> None:
    completions = [
        completion_from_output(_output([7, 8, 2], [-0.5, -1.0, -0.1], "stop")),  # ended on EOS
        completion_from_output(_output([9], [-2.0], "length")),
    ]
    assert completions[0] == Completion([7, 8, 2], [-0.5, -1.0, -0.1], stopped=True)
    rollout = assemble_rollout([[4, 5, 6], [4]], completions, 0, torch.device("cpu"))
    assert rollout.prompt_ids_BP.tolist() == [[4, 5, 6], [0, 0, 4]]  # left-padded
    assert rollout.prompt_mask_BP.tolist() == [[1, 1, 1], [0, 0, 1]]
    assert rollout.completion_ids_BT.tolist() == [[7, 8, 2], [9, 0, 0]]  # right-padded
    assert rollout.completion_mask_BT.tolist() == [[1, 1, 1], [1, 0, 0]]  # EOS included
    expected_logp = torch.tensor([[-0.5, -1.0, -0.1], [-2.0, 0.0, 0.0]])
    assert torch.allclose(rollout.sampler_logp_BT, expected_logp)
    assert rollout.stopped_B.tolist() == [True, False]
    assert rollout.truncated_B.tolist() == [False, True]


def test_pushed_weights_are_the_models_under_hugging_face_names(tiny_model_dir) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    pushed = dict(hf_weights(model))
    expected = model.state_dict()
    assert pushed.keys() == expected.keys()
    assert all(torch.equal(pushed[name], expected[name]) for name in expected)


def test_lora_weights_are_pushed_merged_under_the_base_names(tiny_model_dir) -> None:
    pytest.importorskip("peft")
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    names = set(base.state_dict())
    model = get_peft_model(
        base, LoraConfig(r=2, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    )
    merged = copy.deepcopy(model).merge_and_unload().state_dict()
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    pushed = {name: tensor.clone() for name, tensor in hf_weights(model)}  # copied as vLLM does
    assert pushed.keys() == names
    for name, tensor in merged.items():
        assert torch.allclose(pushed[name], tensor, atol=1e-6), name
    assert not torch.equal(
        pushed["model.layers.0.self_attn.q_proj.weight"],
        before["base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight"],
    )  # the adapter's update is in what vLLM gets...
    for name, tensor in model.state_dict().items():  # ...and the adapter is unmerged after
        assert torch.allclose(tensor, before[name], atol=1e-6), name


def test_without_vllm_the_error_says_what_to_install(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm → ImportError
    with pytest.raises(ImportError, match=r"pip install 'grpo\[vllm\]'"):
        import_vllm()


def test_the_trainer_refuses_vllm_before_loading_anything(
    monkeypatch, tiny_model_dir, arithmetic_jsonl, tmp_path
) -> None:
    from grpo.config import ConfigError, load_config
    from grpo.training.loop import train

    monkeypatch.setitem(sys.modules, "vllm", None)
    config = load_config(
        None,
        [
            f"model.path='{tiny_model_dir}'",
            f"data.train_path='{arithmetic_jsonl}'",
            "rewards=[{function='grpo.rewards:numeric_answer'}]",
            "rollout.engine='vllm'",
            f"train.run_dir='{tmp_path / 'run'}'",
        ],
    )
    with pytest.raises(ConfigError, match="needs vLLM and a CUDA GPU"):
        train(config, verbose=False)
    assert not (tmp_path / "run").exists()


# --- the engine's plumbing against a stand-in for vLLM (CPU) ----------------------------


class _FakeLLM:
    """Records what the engine asks of vLLM; 'samples' tokens from each request's seed."""

    def __init__(self, **arguments) -> None:
        if "logprobs_mode" in arguments and _FakeLLM.old_version:
            raise TypeError("__init__() got an unexpected keyword argument 'logprobs_mode'")
        self.arguments = arguments
        _FakeLLM.instances.append(self)
        self.calls: list[str] = []
        self.loaded: list[str] = []
        runner = SimpleNamespace(model=SimpleNamespace(load_weights=self._load))
        self.llm_engine = SimpleNamespace(
            model_executor=SimpleNamespace(driver_worker=SimpleNamespace(model_runner=runner))
        )

    old_version: ClassVar[bool] = False
    instances: ClassVar[list[_FakeLLM]] = []

    def _load(self, weights) -> None:
        self.loaded += [name for name, _ in weights]

    def generate(self, prompts, sampling_params, use_tqdm=True):
        self.calls.append("generate")
        outputs = []
        for prompt, request in zip(prompts, sampling_params, strict=True):
            seeded = torch.Generator().manual_seed(request.seed)
            tokens = torch.randint(3, 20, (request.max_tokens,), generator=seeded).tolist()
            completion = _output(tokens, [-1.0] * len(tokens), "length")
            outputs.append(
                SimpleNamespace(prompt_token_ids=prompt["prompt_token_ids"], outputs=[completion])
            )
        return outputs

    def sleep(self, level: int) -> None:
        self.calls.append(f"sleep{level}")

    def wake_up(self) -> None:
        self.calls.append("wake")

    def reset_prefix_cache(self) -> None:
        self.calls.append("reset")


@pytest.fixture
def fake_vllm(install_vllm, monkeypatch):
    """`import vllm` gives the stand-in (see conftest.py)."""
    monkeypatch.setattr(_FakeLLM, "old_version", False)
    return install_vllm(_FakeLLM)


def _fake_engine(tiny_model_dir):
    from grpo.rollout.vllm_engine import VLLMEngine

    return VLLMEngine(
        str(tiny_model_dir),
        tokenizer_path=str(tiny_model_dir),
        pad_token_id=0,
        eos_token_ids={2},
        device=torch.device("cpu"),
    )


def test_engine_seeds_rows_sleeps_and_pushes_weights(fake_vllm, tiny_model_dir) -> None:
    from transformers import AutoModelForCausalLM

    engine = _fake_engine(tiny_model_dir)
    arguments = engine.llm.arguments
    assert arguments["enable_sleep_mode"] and arguments["logprobs_mode"] == "processed_logprobs"
    assert arguments["distributed_executor_backend"] == "external_launcher"
    prompts, params = [[5, 6], [7], [8, 9, 10]], SamplingParams(max_new_tokens=4)
    whole = engine.generate(prompts, 2, params, torch.Generator().manual_seed(1))
    assert engine.llm.calls == ["generate", "sleep1"]
    parts = [
        engine.generate(prompts, 2, params, torch.Generator().manual_seed(1), rows=rows)
        for rows in (slice(0, 3), slice(3, 6))  # prompt 1's group split
    ]
    assert engine.llm.calls[2:] == ["wake", "generate", "sleep1", "wake", "generate", "sleep1"]
    assert torch.equal(torch.cat([p.completion_ids_BT for p in parts]), whole.completion_ids_BT)
    assert whole.prompt_ids_BP[2:4].tolist() == [[0, 0, 7], [0, 0, 7]]
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    engine.sync_weights(model)
    assert engine.llm.calls[-2:] == ["wake", "reset"]  # awake for the next rollout
    assert engine.llm.loaded == list(model.state_dict())


def test_an_older_vllm_without_logprobs_mode_still_starts(fake_vllm, tiny_model_dir) -> None:
    _FakeLLM.old_version = True
    engine = _fake_engine(tiny_model_dir)
    assert "logprobs_mode" not in engine.llm.arguments


def test_the_trainer_builds_vllm_from_the_config_values(
    fake_vllm, tiny_model_dir, arithmetic_jsonl
) -> None:
    """rollout.vllm_* and model.* reach vllm.LLM; max_model_len 0 makes room for every turn."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grpo.config import load_config
    from grpo.rounds.engines import rollout_engine

    config = load_config(
        None,
        [
            f"model.path='{tiny_model_dir}'",
            f"data.train_path='{arithmetic_jsonl}'",
            "data.max_prompt_tokens=100",
            "rewards=[{function='grpo.rewards:numeric_answer'}]",
            "rollout.engine='vllm'",
            "rollout.max_new_tokens=20",
            "rollout.vllm_gpu_memory_utilization=0.25",
            "rollout.vllm_sleep=false",
            "rollout.vllm_enforce_eager=true",
            "agent.tools=['python']",
            "agent.max_turns=3",
            "agent.max_tool_response_tokens=50",
            "train.seed=7",
        ],
    )
    policy = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    engine = rollout_engine(config, policy, tokenizer)
    arguments = _FakeLLM.instances[-1].arguments
    assert arguments["model"] == arguments["tokenizer"] == str(tiny_model_dir)
    assert arguments["max_model_len"] == 100 + 3 * (20 + 50 + 64)
    assert arguments["gpu_memory_utilization"] == 0.25 and arguments["seed"] == 7
    assert arguments["enforce_eager"] and not arguments["enable_sleep_mode"]
    assert arguments["dtype"] == config.model.dtype
    assert engine.device == torch.device("cpu") and engine.pad_token_id == tokenizer.pad_token_id


def test_the_trainer_drives_the_vllm_engine(fake_vllm, tiny_model_dir, arithmetic_jsonl, tmp_path):
    """2 steps with rollout.engine = 'vllm' (the stand-in): rollouts, update, weight push."""
    from grpo.config import load_config
    from grpo.training.loop import train

    config = load_config(
        None,
        [
            f"model.path='{tiny_model_dir}'",
            "model.device='cpu'",
            f"data.train_path='{arithmetic_jsonl}'",
            "rewards=[{function='grpo.rewards:numeric_answer'}]",
            "rollout.engine='vllm'",
            "rollout.group_size=4",
            "rollout.max_new_tokens=5",
            "train.steps=2",
            "train.prompts_per_step=2",
            f"train.run_dir='{tmp_path / 'run'}'",
            "train.progress=false",
            "train.tensorboard=false",
        ],
    )

    def varied(prompts, completions, **_):
        return [float(len(set(c))) for c in completions]

    from grpo.rewards.runner import RewardFunction

    result = train(config, reward_functions=[RewardFunction("varied", varied)], verbose=False)
    trained = [row for row in result.history if row.get("groups_trained", 0) > 0]
    assert trained and all(row["sampler_logp_gap"] > 0 for row in trained)
    assert (result.final_dir / "model.safetensors").exists()
    llm = _FakeLLM.instances[-1]
    assert llm.calls.count("generate") == 2
    assert llm.calls.count("reset") == len(trained)  # weights pushed after each update
    assert "model.embed_tokens.weight" in llm.loaded


# --- on a GPU with vLLM installed -------------------------------------------------------


@pytest.fixture(scope="module")
def gpu_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama with 64-wide heads (vLLM's attention kernels want ≥ 32)."""
    pytest.importorskip("vllm")
    if not torch.cuda.is_available():
        pytest.skip("vLLM rollouts need a CUDA GPU")
    from grpo.demo.model import build_tiny_llama
    from grpo.demo.tokenizer import build_char_tokenizer

    directory = tmp_path_factory.mktemp("vllm_model")
    tokenizer = build_char_tokenizer(directory)
    build_tiny_llama(
        tokenizer, hidden_size=256, layers=2, heads=4, max_positions=256, directory=directory
    )
    return directory


def _gpu_engine(model_dir: Path, **options):
    from grpo.demo.tokenizer import build_char_tokenizer
    from grpo.rollout.vllm_engine import VLLMEngine

    tokenizer = build_char_tokenizer()
    engine = VLLMEngine(
        str(model_dir),
        tokenizer_path=str(model_dir),
        pad_token_id=tokenizer.pad_token_id,
        eos_token_ids={tokenizer.eos_token_id},
        device=torch.device("cuda"),
        dtype="float32",
        gpu_memory_utilization=0.2,
        max_model_len=128,
        **options,
    )
    return engine, tokenizer


def test_vllm_rollout_layout_logprobs_and_weight_push(gpu_model_dir) -> None:
    from transformers import AutoModelForCausalLM

    from grpo.models.logprobs import completion_logprobs
    from grpo.rollout.hf_engine import TransformersEngine

    engine, tokenizer = _gpu_engine(gpu_model_dir, sleep=True)
    prompts = [tokenizer(text)["input_ids"] for text in ("12+3=", "7*8=")]
    params = SamplingParams(temperature=1.0, max_new_tokens=16)
    rollout = engine.generate(prompts, 4, params, torch.Generator().manual_seed(0))
    assert rollout.completion_ids_BT.shape[0] == 8
    mask = rollout.completion_mask_BT
    for row in range(8):
        length = int(mask[row].sum())
        assert mask[row, :length].all() and not mask[row, length:].any()
        if rollout.stopped_B[row]:
            assert rollout.completion_ids_BT[row, length - 1] == tokenizer.eos_token_id
    # The same rows again, split in two (the engine slept in between): the same tokens.
    halves = [
        engine.generate(prompts, 4, params, torch.Generator().manual_seed(0), rows=rows)
        for rows in (slice(0, 3), slice(3, 8))
    ]
    assert torch.cat([h.completion_ids_BT[:, :1] for h in halves]).equal(
        rollout.completion_ids_BT[:, :1]
    )
    policy = AutoModelForCausalLM.from_pretrained(gpu_model_dir).cuda()
    logp, _ = completion_logprobs(
        policy, rollout.prompt_ids_BP, rollout.prompt_mask_BP, rollout.completion_ids_BT, mask
    )
    gap = ((logp - rollout.sampler_logp_BT).abs() * mask).sum() / mask.sum()
    assert gap < 1e-2, f"sampler vs trainer log-prob gap {gap:.2e} at temperature 1"
    # After a weight push vLLM decodes greedily what the changed policy decodes.
    with torch.no_grad():
        for parameter in policy.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)
    engine.sync_weights(policy)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=8)
    pushed = engine.generate(prompts, 1, greedy)
    local = TransformersEngine(
        policy, pad_token_id=tokenizer.pad_token_id, eos_token_ids={tokenizer.eos_token_id}
    ).generate(prompts, 1, greedy)
    width = min(pushed.completion_ids_BT.shape[1], local.completion_ids_BT.shape[1])
    assert torch.equal(
        pushed.completion_ids_BT[:, :width].cpu(), local.completion_ids_BT[:, :width].cpu()
    )
