"""Several processes (torchrun, gloo on CPU): a 2-process run is the 1-process run.

Real ``torchrun --nproc_per_node 2 -m grpo train`` jobs on the tiny model, compared with
``python -m grpo train`` on the same config: the same completions and rewards row for
row (so the same advantages), the same metrics, and the same weights after 2 steps within
1e-5. Also: a group split across processes, FSDP2, a rank that raises, a batch that does
not split evenly. Each torchrun job takes a few seconds.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
import torch

from grpo.config import ConfigError, batch_plan, load_config
from grpo.rollout.engine import SamplingParams, sample_from_uniform
from grpo.rollout.hf_engine import TransformersEngine

REWARD_MODULE = """
import json, os

import user_rewards


def _dump(completions, rewards):
    path = os.environ.get("GRPO_TEST_DUMP")
    if path:
        with open(f"{path}.{os.environ.get('RANK', '0')}", "a") as handle:
            handle.write(json.dumps({"completions": completions, "rewards": rewards}) + "\\n")


def digit_fraction(prompts, completions, **_):
    rewards = user_rewards.digit_fraction(prompts, completions)
    _dump(completions, rewards)
    return rewards


def length_parity(prompts, completions, **_):
    rewards = [float(len(text) % 2) for text in completions]
    _dump(completions, rewards)
    return rewards


def lock_holder(prompts, completions, **_):  # this process's pid, and the lock's holder
    path = os.environ["GRPO_TEST_DUMP"]
    with open(path.removesuffix(".dump") + "/grpo.lock") as handle:
        holder = json.load(handle)["pid"]
    with open(f"{path}.{os.environ.get('RANK', '0')}", "a") as handle:
        handle.write(json.dumps({"me": [os.getpid()], "holder": [holder]}) + "\\n")
    return [float(len(text) % 2) for text in completions]


def fails_on_rank_1(prompts, completions, **_):
    if os.environ.get("RANK") == "1":
        raise ValueError("reward exploded on rank 1")
    return [float(len(text) % 2) for text in completions]
"""


@pytest.fixture
def job(gloo_jobs, tiny_model_dir: Path, arithmetic_jsonl: Path):
    """Writes the config and the reward module; returns run(processes, run_name, *overrides)."""
    tmp_path = gloo_jobs.tmp_path
    (tmp_path / "dist_rewards.py").write_text(REWARD_MODULE)
    config = tmp_path / "grpo.toml"
    config.write_text(
        f'[model]\npath = "{tiny_model_dir}"\n'
        f'[data]\ntrain_path = "{arithmetic_jsonl}"\n'
        '[[rewards]]\nfunction = "dist_rewards:digit_fraction"\n'
        "[rollout]\ngroup_size = 4\nmax_new_tokens = 6\n"
        "[optim]\nlr = 1e-3\n"
        "[train]\nsteps = 2\nprogress = false\ntensorboard = false\n"
        "prompts_per_step = 4\nsequences_per_micro_batch = 3\n"
    )

    def run(processes: int, name: str, *overrides: str) -> subprocess.CompletedProcess:
        return gloo_jobs.run(processes, name, config, *overrides)

    run.tmp_path = tmp_path  # type: ignore[attr-defined]
    run.jobs = gloo_jobs  # type: ignore[attr-defined]
    return run


def _assert_same_run(job, one: str, two: str) -> None:
    # The same completions and rewards, row for row: hence the same advantages.
    single, double = job.jobs.steps(one, 1), job.jobs.steps(two, 2)
    assert len(single) == len(double) == 2
    assert double == single
    # Rank 0 alone wrote the log: one line per step, and the metrics and weights agree.
    metrics = job.jobs.assert_same_run(one, two)
    assert [row["step"] for row in job.jobs.metrics(two)] == [1, 2]
    assert any(row["groups_trained"] > 0 for row in metrics), "no group had reward variance"


def _ok(result: subprocess.CompletedProcess) -> None:
    assert result.returncode == 0, result.stderr[-4000:]


@pytest.mark.parametrize(
    "overrides",
    [
        # 16 rows, 8 per process; micro-batches of 3, so processes keep different counts.
        ("--algorithm.beta=0.05",),
        # 6 rows, 3 per process: prompt 1's group is split between the processes.
        (
            "--train.prompts_per_step=3",
            "--rollout.group_size=2",
            "--train.sequences_per_micro_batch=2",
            "--algorithm.inner_iterations=2",
            "--algorithm.aggregation=token",
        ),
        # The sampler correction (top-k mismatch), GSPO, the entropy bonus and the overlong
        # options: their metrics add up (or take min/max) across processes too.
        pytest.param(
            (
                "--rollout.top_k=4",
                "--algorithm.sampler_correction=tis",
                "--algorithm.ratio_level=sequence",
                "--algorithm.sequence_clip_low=0.2",
                "--algorithm.sequence_clip_high=0.2",
                "--algorithm.entropy_coef=0.01",
                "--algorithm.overlong_buffer=2",
                "--algorithm.mask_truncated_completions=true",
            ),
            marks=pytest.mark.slow,
        ),
    ],
    ids=["whole-groups", "split-group", "corrections"],
)
def test_two_processes_train_exactly_as_one(job, overrides: tuple[str, ...]) -> None:
    _ok(job(1, "one", *overrides))
    two = job(2, "two", *overrides)
    _ok(two)
    assert "2 processes × " in two.stdout and two.stdout.count("final policy saved") == 1
    _assert_same_run(job, "one", "two")


def test_fsdp_trains_exactly_as_one_process(job) -> None:
    from transformers import AutoModelForCausalLM

    overrides = ("--algorithm.beta=0.05", "--train.save_every=1")
    _ok(job(1, "one", *overrides))
    _ok(job(2, "fsdp", "--distributed.strategy=fsdp", *overrides))
    _assert_same_run(job, "one", "fsdp")
    final = job.tmp_path / "fsdp" / "final"
    assert json.loads((final / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]
    AutoModelForCausalLM.from_pretrained(final)
    # The gathered checkpoint resumes: a third step from it, still under FSDP.
    resumed = job(
        2,
        "fsdp",
        "--distributed.strategy=fsdp",
        *overrides,
        "--train.resume=true",
        "--train.steps=3",
    )
    _ok(resumed)
    assert "resumed from" in resumed.stdout
    assert [row["step"] for row in job.jobs.metrics("fsdp")] == [1, 2, 3]


def test_a_rank_that_raises_stops_the_whole_job(job) -> None:
    started = time.monotonic()
    result = job(2, "fails", "--rewards=[{function='dist_rewards:fails_on_rank_1'}]")
    elapsed = time.monotonic() - started
    assert result.returncode != 0
    assert "reward exploded on rank 1" in result.stderr
    assert elapsed < 120, f"the job took {elapsed:.0f} s to stop"


def test_rank_0_takes_the_one_lock_of_the_job(job) -> None:
    """Both processes see the run directory's lock held by rank 0; with the directory
    locked by another process, every rank stops at once naming it (none waits)."""
    import os

    from grpo.runtime.run_lock import acquire_run_lock

    _ok(job(2, "locking", "--rewards=[{function='dist_rewards:lock_holder'}]"))
    for step in job.jobs.steps("locking", 2):
        rank_0 = step["me"][0]
        assert step["holder"] == [rank_0, rank_0] and step["me"][1] != rank_0
    lock = acquire_run_lock(job.tmp_path / "taken")
    try:
        refused = job(2, "taken")
    finally:
        lock.release()
    assert refused.returncode != 0
    line = f"grpo train: error: train.run_dir {job.tmp_path / 'taken'} is in use by another run: "
    assert refused.stderr.count(line + f"process {os.getpid()} on ") == 2  # rank 0 and rank 1
    assert not (job.tmp_path / "taken" / "config.json").exists()


def test_a_batch_that_does_not_split_evenly_is_a_start_up_error(job) -> None:
    result = job(2, "uneven", "--train.prompts_per_step=3", "--rollout.group_size=3")
    assert result.returncode != 0
    assert "3 × 3 = 9 sequences per step cannot be split evenly over 2 processes" in result.stderr


def test_batch_plan_names_the_keys(tiny_model_dir, arithmetic_jsonl) -> None:
    config = load_config(
        None,
        [
            f"model.path='{tiny_model_dir}'",
            f"data.train_path='{arithmetic_jsonl}'",
            "rewards=[{function='grpo.rewards:numeric_answer'}]",
            "train.prompts_per_step=3",
            "rollout.group_size=2",
        ],
    )
    assert batch_plan(config, 3).sequences_per_rank == 2  # 6 rows: a group may span ranks
    with pytest.raises(ConfigError, match=r"train.prompts_per_step × rollout.group_size"):
        batch_plan(config, 4)


def _engine(tiny_model_dir: Path, chunk: int) -> tuple[TransformersEngine, list[list[int]]]:
    from transformers import AutoModelForCausalLM

    from grpo.demo.tokenizer import build_char_tokenizer

    tokenizer = build_char_tokenizer()
    engine = TransformersEngine(
        AutoModelForCausalLM.from_pretrained(tiny_model_dir),
        pad_token_id=tokenizer.pad_token_id,
        eos_token_ids={tokenizer.eos_token_id},
        max_sequences_per_batch=chunk,
    )
    prompts = [tokenizer(text)["input_ids"] for text in ("12+3=", "7*8=", "100-1=")]
    return engine, prompts


def test_a_row_rolls_out_the_same_whatever_the_split(tiny_model_dir) -> None:
    """3 prompts × G = 4: rows [0, 6) and [6, 12) (prompt 1's group split) and chunks of 5
    give the tokens and log-probs of the whole batch at once."""
    params = SamplingParams(temperature=0.9, top_p=0.95, max_new_tokens=8)
    whole_engine, prompts = _engine(tiny_model_dir, chunk=512)
    whole = whole_engine.generate(prompts, 4, params, torch.Generator().manual_seed(3))
    split_engine, _ = _engine(tiny_model_dir, chunk=5)
    halves = [
        split_engine.generate(prompts, 4, params, torch.Generator().manual_seed(3), rows=rows)
        for rows in (slice(0, 6), slice(6, 12))
    ]
    for half, rows in zip(halves, (slice(0, 6), slice(6, 12)), strict=True):
        width = half.completion_ids_BT.shape[1]
        mask = whole.completion_mask_BT[rows]
        assert torch.equal(half.completion_mask_BT, mask[:, :width])
        assert not mask[:, width:].any()
        assert torch.equal(
            half.completion_ids_BT * half.completion_mask_BT,
            (whole.completion_ids_BT[rows] * mask)[:, :width],
        )
        assert torch.allclose(half.sampler_logp_BT, whole.sampler_logp_BT[rows, :width], atol=1e-5)
        real = half.prompt_mask_BP.bool()
        whole_real = whole.prompt_mask_BP[rows].bool()
        for row in range(6):
            assert half.prompt_ids_BP[row][real[row]].tolist() == (
                whole.prompt_ids_BP[rows][row][whole_real[row]].tolist()
            )


def test_inverse_cdf_sampling_follows_the_distribution() -> None:
    probs = torch.tensor([[0.5, 0.0, 0.3, 0.2, 0.0]])
    u = torch.linspace(0, 1, 100_001)[:-1]  # a fine grid over [0, 1)
    tokens = sample_from_uniform(probs.expand(len(u), -1), u)
    frequencies = torch.bincount(tokens, minlength=5).float() / len(u)
    assert torch.allclose(frequencies, probs[0], atol=1e-4)
    edge = sample_from_uniform(probs, torch.tensor([1.0 - 2**-24]))
    assert edge.item() == 3  # the last token with probability, never a zero-probability one


# Length parity in groups of 2: about half the groups have no variance, so steps refill.
REFILLING = (
    "--rewards=[{function='dist_rewards:length_parity'}]",
    "--rollout.group_size=2",
    "--train.sequences_per_micro_batch=2",
    "--algorithm.dynamic_sampling=true",
    "--algorithm.max_generation_rounds=3",
)


def test_a_torchrun_process_keeps_what_holds_its_group_until_it_exits() -> None:
    # Freed while gloo's worker thread still drops the last collective, the group's
    # destructor deadlocks on the GIL (Dist.close): under torchrun nothing holding it is freed.
    from grpo.runtime import distributed

    holder, other = object(), object()
    distributed.Dist(rank=1, world_size=2).close(holder)
    distributed.Dist().close(other)  # one process: no group, nothing kept
    assert holder in distributed._HELD_UNTIL_EXIT and other not in distributed._HELD_UNTIL_EXIT
    distributed._HELD_UNTIL_EXIT.remove(holder)


@pytest.mark.slow
def test_dynamic_sampling_with_two_processes_trains_as_one(job) -> None:
    # 3 prompts × 2 = 6 rows per round, 3 per process, prompt 1's group split between them.
    overrides = (*REFILLING, "--train.prompts_per_step=3")
    _ok(job(1, "one", *overrides))
    _ok(job(2, "two", *overrides))
    single = job.jobs.steps("one", 1)
    assert job.jobs.steps("two", 2) == single  # every round, row for row
    metrics = job.jobs.assert_same_run("one", "two")
    assert sum(row["generation_rounds"] for row in metrics) == len(single) > 2


@pytest.mark.slow
def test_completions_log_pairs_each_row_with_its_own_advantage_across_rounds(job) -> None:
    # Rank 0 logs its rows of the step's last generation round. With dynamic sampling the
    # rows of several rounds are regrouped per process for the update; the logged
    # advantages must still be those of the logged completions: the 1-process log's rows
    # for the same rows (the runs are row for row identical).
    overrides = (
        *REFILLING,
        "--train.prompts_per_step=2",
        "--train.steps=4",
        "--train.completions_every=1",
    )
    _ok(job(1, "one", *overrides))
    _ok(job(2, "two", *overrides))
    metrics = job.jobs.metrics("one")
    assert any(row["generation_rounds"] > 1 for row in metrics), "no step refilled"

    def logged(name: str) -> dict[int, list[dict]]:
        rows: dict[int, list[dict]] = {}
        for line in (job.tmp_path / name / "completions.jsonl").read_text().splitlines():
            row = json.loads(line)
            rows.setdefault(row["step"], []).append(row)
        return rows

    single, double = logged("one"), logged("two")
    assert sorted(double) == sorted(single) == [1, 2, 3, 4]
    for step, rows in single.items():
        assert double[step] == rows[: len(rows) // 2], f"step {step}"


def test_async_rollouts_under_torchrun_train_as_one_sync_process(job) -> None:
    """rollout.mode = "async" with 2 learner processes: rank 0 holds the workers and sends
    each process its rows; at max_staleness 0 that is the 1-process synchronous run."""
    from safetensors.torch import load_file

    _ok(job(1, "one"))
    two = job(2, "two", "--rollout.mode=async", "--rollout.max_staleness=0", "--rollout.workers=2")
    _ok(two)
    one_rows, two_rows = job.jobs.metrics("one"), job.jobs.metrics("two")
    assert len(one_rows) == len(two_rows) == 2
    for want, have in zip(one_rows, two_rows, strict=True):
        assert all(k in have for k in want)
        for key, value in want.items():
            if not (key.startswith("time/") or key.endswith("/seconds")):
                assert have[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
        assert have["async/version_lag_max"] == 0
    a = load_file(job.tmp_path / "one" / "final" / "model.safetensors")
    b = load_file(job.tmp_path / "two" / "final" / "model.safetensors")
    assert all(torch.allclose(a[k], b[k], atol=1e-5, rtol=0) for k in a)
