import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


def _grpo(*args: str, cwd=None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "grpo", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
    )


def test_bad_override_names_the_key(tmp_path) -> None:
    config = tmp_path / "c.toml"
    config.write_text(
        '[model]\npath = "m"\n[data]\ntrain_path = "d.jsonl"\n'
        '[[rewards]]\nfunction = "grpo.rewards:numeric_answer"\n'
    )
    result = _grpo("train", str(config), "--rollout.grup_size=4")
    assert result.returncode == 2
    assert "unknown config key 'rollout.grup_size'" in result.stderr


def test_missing_model_directory_is_a_clear_error(tmp_path, arithmetic_jsonl) -> None:
    config = tmp_path / "c.toml"
    config.write_text(
        f'[model]\npath = "{tmp_path / "nope"}"\n[data]\ntrain_path = "{arithmetic_jsonl}"\n'
        '[[rewards]]\nfunction = "grpo.rewards:numeric_answer"\n'
    )
    result = _grpo("train", str(config))
    assert result.returncode == 2
    assert "model.path" in result.stderr or "nope" in result.stderr


def test_train_then_plot(tmp_path, tiny_model_dir, arithmetic_jsonl) -> None:
    config = tmp_path / "c.toml"
    config.write_text(
        f'[model]\npath = "{tiny_model_dir}"\n[data]\ntrain_path = "{arithmetic_jsonl}"\n'
        '[[rewards]]\nfunction = "grpo.rewards:numeric_answer"\n'
        f'[train]\nsteps = 2\nprompts_per_step = 2\nrun_dir = "{tmp_path / "run"}"\n'
        "[rollout]\ngroup_size = 2\nmax_new_tokens = 4\n"
    )
    result = _grpo("train", str(config), "--train.progress=false")
    assert result.returncode == 0, result.stderr
    assert "2 prompts/step × G=2 = 4 sequences/step" in result.stdout
    assert "torch threads: 1 (OMP_NUM_THREADS)" in result.stdout  # conftest sets it to 1
    rows = [
        json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    ]
    assert [row["step"] for row in rows] == [1, 2]
    plot = _grpo("plot", str(tmp_path / "run"))
    assert plot.returncode == 0 and "reward/mean" in plot.stdout


@pytest.mark.slow
@pytest.mark.timeout(1200)  # above the subprocesses' own, so that one reports first
def test_demo_quick_runs_end_to_end_and_every_path_and_command_it_prints_works(
    tmp_path, demo_base
) -> None:
    # A hang guard, not a speed check: a loaded 2-core machine takes minutes.
    work_dir = tmp_path / "demo"
    shutil.copytree(demo_base, work_dir / "base")  # the run's shared warm start, reused
    result = _grpo("demo", "--quick", "--work-dir", str(work_dir), timeout=700)
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"warm start: reused from {work_dir / 'base'} (" in result.stdout
    assert "held-out greedy accuracy" in result.stdout
    assert (work_dir / "run" / "final" / "model.safetensors").exists()
    # Captured, stdout is not a terminal: plain lines, no carriage-return progress updates.
    assert "\r" not in result.stdout + result.stderr
    lines = result.stdout.splitlines()
    # every path it names exists
    paths = {
        word.strip("`,:;()") for line in lines for word in line.split() if str(work_dir) in word
    }
    assert paths and all(Path(p).exists() for p in paths), sorted(paths)
    # ... and so does everything it says the run directory holds
    (listing,) = [line for line in lines if line.startswith("run directory: ")]
    for entry in listing.split(": ", 2)[2].split(", "):
        assert (work_dir / "run" / entry.split(" ")[0]).exists(), entry
    assert "tensorboard/" in listing  # the tensorboard extra is installed, as demo.sh does
    # every command it suggests runs (the training rerun last: it overwrites the run)
    commands = [line.split("   #")[0].strip() for line in lines if line.startswith("  grpo ")]
    assert [shlex.split(c)[1] for c in commands] == ["plot", "report", "eval", "train"]
    for command in commands:
        done = _grpo(*shlex.split(command)[1:], timeout=300)
        assert done.returncode == 0, f"{command}\n{done.stderr[-2000:]}"


@pytest.mark.slow
def test_quiet_train_then_report_then_eval(tmp_path, tiny_model_dir, arithmetic_jsonl) -> None:
    config = tmp_path / "c.toml"
    config.write_text(
        f'[model]\npath = "{tiny_model_dir}"\n[data]\ntrain_path = "{arithmetic_jsonl}"\n'
        '[[rewards]]\nfunction = "grpo.rewards:numeric_answer"\n'
        f'[train]\nsteps = 2\nprompts_per_step = 2\nrun_dir = "{tmp_path / "run"}"\n'
        "completions_every = 1\n[rollout]\ngroup_size = 2\nmax_new_tokens = 4\n"
    )
    trained = _grpo("train", str(config), "--quiet")
    assert trained.returncode == 0, trained.stderr
    lines = [line for line in trained.stdout.splitlines() if line.startswith("step ")]
    assert [line.split("  ")[0] for line in lines] == ["step 1/2", "step 2/2"]
    assert all(" s/step  eta " in line for line in lines)
    assert "\r" not in trained.stdout + trained.stderr  # no progress bar
    assert len((tmp_path / "run" / "completions.jsonl").read_text().splitlines()) == 2 * 4

    report = _grpo("report", str(tmp_path / "run"))
    assert report.returncode == 0, report.stderr
    assert (tmp_path / "run" / "report" / "index.html").exists()
    assert (tmp_path / "run" / "report" / "reward.png").exists()

    evaluated = _grpo(
        "eval", str(tmp_path / "run" / "final"), "--data", str(arithmetic_jsonl),
        "--samples", "2", "--k", "1,2", "--json", str(tmp_path / "eval.json"),
        "--rollout.max_new_tokens=4",
    )  # fmt: skip
    assert evaluated.returncode == 0, evaluated.stderr
    assert "pass@1 (greedy)" in evaluated.stdout and "pass@2 (2 samples, T = 1)" in evaluated.stdout
    result = json.loads((tmp_path / "eval.json").read_text())
    assert result["prompts"] == 64 and result["samples"] == 2
    assert set(result["pass@k"]) == {"1", "2"}
    assert result["pass@k"]["1"] <= result["pass@k"]["2"]
    assert set(result["reward_means_greedy"]) == {"numeric_answer"}


def test_eval_names_a_missing_dataset(tmp_path, tiny_model_dir, capsys) -> None:
    from grpo.cli.main import main

    assert main(["eval", str(tiny_model_dir), "--data", str(tmp_path / "none.jsonl")]) == 2
    assert "grpo eval: error: dataset not found" in capsys.readouterr().err
    assert main(["eval", str(tiny_model_dir)]) == 2
    assert "grpo eval needs a dataset: --data FILE" in capsys.readouterr().err


def test_train_help_names_the_overrides_and_the_reference_and_eval_help_the_defaults(
    capsys,
) -> None:
    from grpo.cli.main import main

    with pytest.raises(SystemExit):
        main(["train", "--help"])
    shown = " ".join(capsys.readouterr().out.split())  # argparse rewraps the text
    assert "--section.key=value" in shown and "`grpo docs`" in shown
    assert "configuration reference" in shown
    with pytest.raises(SystemExit):
        main(["eval", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "(default: 1,4,8)" in shown and "(default: 0)" in shown
