import itertools

import pytest

from grpo.eval.evaluate import evaluate_model, greedy_completions, pass_at_k
from grpo.eval.report import EvalReport
from grpo.rewards.runner import RewardFunction


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (4, 1, 2, 0.5),  # 1 − C(3,2)/C(4,2) = 1 − 3/6
        (5, 2, 3, 0.9),  # 1 − C(3,3)/C(5,3) = 1 − 1/10
        (8, 3, 1, 0.375),  # k = 1: c/n
        (8, 2, 7, 1.0),  # n − c = 6 < k = 7: every 7-subset holds a correct one
        (10, 0, 5, 0.0),
        (10, 10, 1, 1.0),
        (20, 5, 10, 1 - 3003 / 184756),  # C(15,10)/C(20,10)
    ],
)
def test_pass_at_k_hand_computed(n, c, k, expected) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(expected, rel=1e-12)


def test_pass_at_k_equals_the_fraction_of_k_subsets_holding_a_correct_sample() -> None:
    for n in range(1, 8):
        for c in range(n + 1):
            samples = [True] * c + [False] * (n - c)
            for k in range(1, n + 1):
                subsets = list(itertools.combinations(samples, k))
                exact = sum(any(subset) for subset in subsets) / len(subsets)
                assert pass_at_k(n, c, k) == pytest.approx(exact, abs=1e-12)


@pytest.mark.parametrize(("n", "c", "k"), [(4, 5, 1), (4, -1, 1), (4, 2, 5), (4, 2, 0)])
def test_pass_at_k_rejects_impossible_counts(n, c, k) -> None:
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def starts_with_digit(prompts, completions, **_) -> list[float]:
    return [float(text[:1].isdigit()) for text in completions]


def length_reward(prompts, completions, **_) -> list[float]:
    return [float(len(text)) for text in completions]


def test_evaluate_model_greedy_and_sampled(tiny_model_dir, arithmetic_jsonl) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grpo.data.dataset import load_prompt_dataset

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir)).eval()
    dataset = load_prompt_dataset(arithmetic_jsonl, tokenizer)
    correct = RewardFunction(name="starts_with_digit", fn=starts_with_digit)
    length = RewardFunction(name="length", fn=length_reward)
    report = evaluate_model(
        model, tokenizer, dataset, [correct, length], correct, max_new_tokens=5, samples=4,
        ks=(1, 2, 4), seed=3,
    )  # fmt: skip
    greedy = greedy_completions(model, tokenizer, dataset.prompt_token_ids, max_new_tokens=5)
    assert report.greedy_correct == [text[:1].isdigit() for text in greedy]
    assert report.greedy_reward_means["length"] == pytest.approx(
        sum(map(len, greedy)) / len(greedy), rel=1e-6
    )
    counts = report.sample_correct_counts
    assert len(counts) == len(dataset) and all(0 <= c <= 4 for c in counts)
    assert 0 < sum(counts) < 4 * len(dataset)  # a random model: some digits, not all
    # pass@1 is the mean fraction correct; pass@n is the fraction of prompts with any.
    assert report.pass_at[1] == pytest.approx(sum(counts) / (4 * len(dataset)))
    assert report.pass_at[4] == pytest.approx(sum(c > 0 for c in counts) / len(dataset))
    assert report.pass_at[2] == pytest.approx(
        sum(pass_at_k(4, c, 2) for c in counts) / len(dataset)
    )
    assert report.pass_at[1] <= report.pass_at[2] <= report.pass_at[4]
    assert report.sampled_reward_means["starts_with_digit"] == pytest.approx(report.pass_at[1])
    again = evaluate_model(
        model, tokenizer, dataset, [correct], correct, max_new_tokens=5, samples=4, ks=(4,), seed=3
    )
    assert again.sample_correct_counts == counts  # seeded: the same samples


def test_report_summary_and_table() -> None:
    report = EvalReport(
        source="test.jsonl",
        correct_reward="numeric_answer",
        greedy_correct=[True, False, False, True],
        greedy_reward_means={"numeric_answer": 0.5},
        samples=4,
        temperature=1.0,
        sample_correct_counts=[4, 0, 1, 2],
        sampled_reward_means={"numeric_answer": 0.4375},
        pass_at={1: 0.4375, 4: 0.75},
    )
    assert report.summary() == {
        "data": "test.jsonl",
        "prompts": 4,
        "correct_reward": "numeric_answer",
        "pass@1_greedy": 0.5,
        "reward_means_greedy": {"numeric_answer": 0.5},
        "samples": 4,
        "temperature": 1.0,
        "pass@k": {"1": 0.4375, "4": 0.75},
        "reward_means_sampled": {"numeric_answer": 0.4375},
    }
    assert report.table().splitlines() == [
        "4 prompts of test.jsonl; correct = numeric_answer ≥ 1",
        "metric                         value",
        "pass@1 (greedy)                50.0%",
        "pass@1 (4 samples, T = 1)      43.8%",
        "pass@4 (4 samples, T = 1)      75.0%",
        "mean numeric_answer (greedy)   0.5",
        "mean numeric_answer (sampled)  0.4375",
    ]


# --- what the accuracy is ---------------------------------------------------------------


def test_the_environment_reward_is_the_accuracy_when_alone_or_asked() -> None:
    from grpo.agents.trajectories import ENVIRONMENT_REWARD
    from grpo.config import AgentConfig, ConfigError
    from grpo.eval.evaluate import correctness_reward, run_accuracy_reward
    from grpo.rewards import numeric_answer

    env = AgentConfig(environment="my_env:Guess")
    asked = AgentConfig(environment="my_env:Guess", environment_accuracy=True)
    builtin = RewardFunction(name="numeric_answer", fn=numeric_answer)  # is_accuracy
    plain = RewardFunction(name="length", fn=length_reward)
    marked = RewardFunction(name="length", fn=length_reward, accuracy=True)
    assert run_accuracy_reward([], env) is ENVIRONMENT_REWARD  # the only reward
    assert run_accuracy_reward([builtin], env) is builtin  # a reward beside it: as before
    assert run_accuracy_reward([plain], env) is None
    assert run_accuracy_reward([builtin, plain], asked) is ENVIRONMENT_REWARD
    assert run_accuracy_reward([builtin], AgentConfig()) is builtin  # no environment
    with pytest.raises(ConfigError, match="'length' already sets accuracy = true"):
        run_accuracy_reward([marked], asked)
    with pytest.raises(ConfigError, match=r"environment_accuracy needs an agent\.environment"):
        run_accuracy_reward([builtin], AgentConfig(environment_accuracy=True))
    with pytest.raises(ConfigError, match=r"or agent\.environment_accuracy = true"):
        correctness_reward("", [plain], env)


# --- the engine grpo eval samples with ------------------------------------------------------


def test_grpo_eval_samples_with_the_trainers_engine(tiny_config, tiny_model_dir) -> None:
    """The rollout.* keys reach eval's engine through the trainer's factory."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grpo.cli.eval_command import eval_engine
    from grpo.rollout.hf_engine import TransformersEngine

    config = tiny_config("rollout.max_sequences_per_batch=3")
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir)).eval()
    engine = eval_engine(config, model, tokenizer, max_new_tokens=5)
    assert isinstance(engine, TransformersEngine) and engine.model is model
    assert engine.max_sequences_per_batch == 3 and engine.all_done is None
    assert (
        engine.decode is not None and engine.decode([tokenizer.convert_tokens_to_ids("7")]) == "7"
    )


def test_grpo_eval_without_vllm_fails_as_grpo_train_does(
    monkeypatch, capsys, tiny_config, tiny_model_dir, arithmetic_jsonl, tmp_path
) -> None:
    """rollout.engine = "vllm" without vLLM: train's one-line error, no built-in fallback."""
    import sys

    from grpo.cli.main import main
    from grpo.config import ConfigError
    from grpo.training.loop import train

    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm → ImportError
    config = tiny_config("rollout.engine='vllm'", run_dir=tmp_path)
    with pytest.raises(ConfigError) as trained:
        train(config, verbose=False)
    out = tmp_path / "eval.json"
    args = [str(tiny_model_dir), "--data", str(arithmetic_jsonl), "--json", str(out)]
    assert main(["eval", *args, "--rollout.engine=vllm"]) == 2
    printed = capsys.readouterr()
    assert printed.err == f"grpo eval: error: {trained.value}\n"
    assert "pip install 'grpo[vllm]'" in printed.err and printed.out == ""
    assert not out.exists()
