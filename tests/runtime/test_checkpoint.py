"""Checkpoints: the step-K layout, atomic writes, pruning, and exact resume.

The exact-resume test trains 4 steps straight and, separately, 2 steps stopped by a real
SIGTERM (raised from inside step 2) then resumed for 2 more: the parameters and the
optimizer moments are bitwise equal and the metric lines are identical except their
timings. The stop falls on an epoch boundary (4 prompts, 2 per step), each step makes
μ = 2 optimizer steps, and the LR schedule warms up then decays, so the data cursor, the
scheduler and every RNG stream have to come back exactly. (benchmarks/kill_test.py does
the same with SIGKILLs at random moments.)
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
import torch

from grpo.config import ConfigError
from grpo.rewards.runner import RewardFunction
from grpo.runtime.checkpoint import (
    CheckpointError,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    save_checkpoint,
    verify_checkpoint,
)
from grpo.runtime.resume import clean_leftovers, rewind_logs
from tests.user_code.user_rewards import digit_fraction

STEPS = 4


def _save(run_dir: Path, model, tokenizer, step: int, sampler_state=None, keep: int = 2) -> Path:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    return save_checkpoint(
        run_dir,
        step=step,
        model=model,
        tokenizer=tokenizer,
        optimizer=optimizer,
        scheduler=scheduler,
        sampler_state=sampler_state or {"epoch": 0, "position": step},
        generator=torch.Generator().manual_seed(step),
        config={"train": {"steps": 9}},
        keep=keep,
    )


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return (
        AutoModelForCausalLM.from_pretrained(tiny_model_dir),
        AutoTokenizer.from_pretrained(tiny_model_dir),
    )


def test_layout_latest_pointer_and_keep_last_k(tmp_path, tiny) -> None:
    model, tokenizer = tiny
    for step in (1, 2, 3):
        _save(tmp_path, model, tokenizer, step, keep=2)
    root = tmp_path / "checkpoints"
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step-2", "step-3"]
    assert (root / "latest").read_text() == "step-3\n"
    assert latest_checkpoint(tmp_path) == root / "step-3"
    assert verify_checkpoint(root / "step-3") == 3
    files = {p.name for p in (root / "step-3").iterdir()}
    assert {"model.safetensors", "trainer_state.pt", "trainer_state.json"} <= files
    assert "run_config.json" in files and "tokenizer.json" in files


def test_sampler_state_of_any_nesting_round_trips(tmp_path, tiny) -> None:
    import numpy

    state = {
        "epoch": 2,
        "position": 5,
        "curriculum": {"weights": [0.25, 0.5, 1e-30], "solved": [[1, 0], [0, 0]], "name": "x"},
        "pass_rate": torch.tensor([0.5, 0.125]),
        "window": (3, None, True),
        "from_numpy": numpy.arange(3, dtype=numpy.int64),
        "numpy_scalar": numpy.float64(0.1),
    }
    directory = _save(tmp_path, *tiny, 1, sampler_state=state)
    loaded = load_checkpoint(directory)["tensors"]["sampler"]  # torch.load(weights_only=True)
    assert loaded["curriculum"] == state["curriculum"]
    assert torch.equal(loaded["pass_rate"], state["pass_rate"])
    assert loaded["window"] == (3, None, True)
    assert loaded["from_numpy"] == [0, 1, 2] and loaded["numpy_scalar"] == 0.1
    with pytest.raises(TypeError, match=r"sampler_state\['bad'\]: a set cannot be saved"):
        _save(tmp_path, *tiny, 2, sampler_state={"bad": {1, 2}})


def test_what_a_killed_run_leaves_is_ignored_then_cleaned(tmp_path, tiny) -> None:
    for step in (1, 2):
        _save(tmp_path, *tiny, step)
    root = tmp_path / "checkpoints"
    (root / ".tmp-step-3").mkdir()  # killed while writing step 3
    (root / ".tmp-step-3" / "model.safetensors").write_bytes(b"\0" * 10)
    (root / "step-4").mkdir()  # no trainer_state.json: never completed
    (root / ".trash-step-1").mkdir()  # killed while deleting
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-1", "step-2"]
    assert latest_checkpoint(tmp_path) == root / "step-2"
    (root / "latest").unlink()  # without a pointer: the newest complete folder
    assert latest_checkpoint(tmp_path) == root / "step-2"
    clean_leftovers(tmp_path, resumed_step=2)
    assert sorted(p.name for p in root.iterdir()) == ["step-1", "step-2"]


def test_a_torn_checkpoint_file_is_reported(tmp_path, tiny) -> None:
    directory = _save(tmp_path, *tiny, 1)
    weights = directory / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(CheckpointError, match=r"model\.safetensors is missing or not"):
        verify_checkpoint(directory)


def test_rewind_cuts_every_appended_log_back_to_the_checkpoint_and_a_torn_line(tmp_path) -> None:
    """A run killed in step 4 after logging it, resumed from step 2: metrics.jsonl and
    completions.jsonl (4 rows a step) keep steps 0-2 only; the torn last line goes too."""
    metrics = [json.dumps({"step": s, "loss": 0.5}) for s in range(5)]
    (tmp_path / "metrics.jsonl").write_text("\n".join(metrics) + '\n{"step": 5, "lo')
    rows = [
        json.dumps({"step": s, "completion": f"c{s}.{g}"}) for s in range(1, 5) for g in range(4)
    ]
    (tmp_path / "completions.jsonl").write_text("\n".join(rows[:-1]) + "\n" + rows[-1][:9])
    rewind_logs(tmp_path, 2)
    text = (tmp_path / "metrics.jsonl").read_text()
    assert [json.loads(line)["step"] for line in text.splitlines()] == [0, 1, 2]
    kept = (tmp_path / "completions.jsonl").read_text()
    assert kept == "\n".join(rows[:8]) + "\n"  # steps 1 and 2, 4 rows each
    rewind_logs(tmp_path, -1)  # a fresh start: nothing is kept
    assert (tmp_path / "completions.jsonl").read_text() == ""


# --- exact resume ------------------------------------------------------------------------


SETTINGS = (  # over tiny_config_at's
    f"train.steps={STEPS}",
    "train.prompts_per_step=2",
    "rollout.max_new_tokens=4",
    "train.sequences_per_micro_batch=3",
    "algorithm.inner_iterations=2",
    "algorithm.beta=0.05",
    "optim.lr=3e-3",
    "optim.schedule='linear'",
    "optim.warmup_steps=2",
    "train.save_every=2",
    "train.tensorboard=false",
)


@pytest.fixture(scope="module")
def runs(tiny_config_at, tmp_path_factory):
    """(straight run dir, stopped-and-resumed run dir, config factory)."""
    from grpo.demo.task import make_splits, write_jsonl
    from grpo.training.loop import train

    root = tmp_path_factory.mktemp("resume")
    rows, _ = make_splits(4, 0, seed=3)
    data = write_jsonl(rows, root / "four.jsonl")

    def config(run: str, *extra: str):
        return tiny_config_at(root / run, *SETTINGS, *extra, data=data)

    rewards = [RewardFunction(name="digit_fraction", fn=digit_fraction)]
    train(config("straight"), reward_functions=rewards, verbose=False)

    calls = []

    def sigterm_in_step_2(prompts, completions, **columns):
        calls.append(1)
        if len(calls) == 2:  # a real SIGTERM, mid-step: the step finishes, then it stops
            signal.raise_signal(signal.SIGTERM)
        return digit_fraction(prompts, completions)

    stopped = train(
        config("stopped"),
        reward_functions=[RewardFunction(name="digit_fraction", fn=sigterm_in_step_2)],
        verbose=False,
    )
    assert stopped.stopped_by == "SIGTERM" and [r["step"] for r in stopped.history] == [1, 2]
    assert (root / "stopped" / "checkpoints" / "latest").read_text() == "step-2\n"
    resumed = train(config("stopped", "train.resume=true"), reward_functions=rewards, verbose=False)
    assert [r["step"] for r in resumed.history] == [3, 4]
    return root / "straight", root / "stopped", config


def _metric_lines(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    timing = ("time/", "/seconds")  # wall-clock fields: everything else is identical
    return [{k: v for k, v in row.items() if not any(t in k for t in timing)} for row in rows]


def test_stop_at_2_and_resume_equals_4_straight_bitwise(runs) -> None:
    from safetensors.torch import load_file

    straight, resumed, _ = runs
    for name in ("final/model.safetensors", f"checkpoints/step-{STEPS}/model.safetensors"):
        a, b = load_file(straight / name), load_file(resumed / name)
        assert a.keys() == b.keys()
        for key in a:
            assert torch.equal(a[key], b[key]), f"{name}: {key} differs"
    lines = _metric_lines(resumed)
    assert [row["step"] for row in lines] == list(range(1, STEPS + 1))
    assert lines == _metric_lines(straight)
    assert any(row["groups_trained"] > 0 for row in lines)
    state_a = load_checkpoint(straight / f"checkpoints/step-{STEPS}")["tensors"]
    state_b = load_checkpoint(resumed / f"checkpoints/step-{STEPS}")["tensors"]
    for index, moments in state_a["optimizer"]["state"].items():
        for key, value in moments.items():
            assert torch.equal(value, state_b["optimizer"]["state"][index][key]), (index, key)
    assert state_a["sampler"] == state_b["sampler"]
    assert (state_a["sampler"]["epoch"], state_a["sampler"]["position"]) == (1, 4)


def test_resume_of_a_finished_run_says_so(runs, capsys) -> None:
    from grpo.training.loop import train

    straight, _, config = runs
    before = (straight / "metrics.jsonl").read_text()
    result = train(config("straight", "train.resume=true"), reward_functions=[], verbose=True)
    out = capsys.readouterr().out
    assert f"resumed from {straight / 'checkpoints' / f'step-{STEPS}'} at step {STEPS}" in out
    assert f"nothing to train: the run is complete at train.steps = {STEPS}" in out
    assert result.history == [] and (straight / "metrics.jsonl").read_text() == before


def test_resume_past_train_steps_and_a_fresh_start_over_checkpoints_are_errors(runs) -> None:
    from grpo.training.loop import train

    _, _, config = runs
    with pytest.raises(ConfigError, match=rf"train\.steps = 3 but .* is at step {STEPS}"):
        train(config("straight", "train.resume=true", "train.steps=3"), verbose=False)
    with pytest.raises(CheckpointError, match=r"already holds checkpoints .*--resume"):
        train(config("straight"), verbose=False)


@pytest.mark.slow
@pytest.mark.timeout(1200)  # above the script's own 900 s, so that one reports first
def test_kill_test_survives_sigkills_mid_step_and_mid_write(tmp_path) -> None:
    """benchmarks/kill_test.py, shortened: 3 SIGKILLs (one random, two inside checkpoint
    writes), each resumed; the final weights and every log (metrics, completions, prompt
    statistics, TensorBoard) equal an uninterrupted run's."""
    import subprocess
    import sys

    script = Path(__file__).parents[2] / "benchmarks" / "kill_test.py"
    summary_path = tmp_path / "summary.json"
    result = subprocess.run(
        [
            *(sys.executable, str(script), "--kills", "3", "--steps", "8"),
            *("--work-dir", str(tmp_path / "kill_test"), "--json", str(summary_path)),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = json.loads(summary_path.read_text())
    assert summary["kills"] == 3 and summary["resumes"] >= 1
    assert summary["weights_bitwise_equal"] and summary["all_logs_equal"], summary["logs_equal"]
