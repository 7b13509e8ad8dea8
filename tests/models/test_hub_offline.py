"""Hub ids offline: models and datasets from a hub cache built here, in huggingface_hub's
layout (as ``hf download`` leaves it); an id not in it is one line and exit 2."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

JOB_TIMEOUT_S = 300  # generous: the CPU cores are shared


def _grpo(hub: SimpleNamespace, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "grpo", *args],
        capture_output=True,
        text=True,
        env=hub.env,
        cwd=cwd,
        timeout=JOB_TIMEOUT_S,
    )


def _sums_repository(folder: Path) -> Path:
    """A dataset repository as on the Hub: parquet files under data/, one per split."""
    import datasets

    for split, rows in (("train", range(1, 7)), ("test", range(10, 13))):
        table = datasets.Dataset.from_list(
            [{"prompt": f"{i}+1=", "answer": str(i + 1)} for i in rows]
        )
        table.to_parquet(str(folder / "data" / f"{split}-00000-of-00001.parquet"))
    return folder


@pytest.fixture
def cached(offline_hub: SimpleNamespace, tmp_path: Path, tiny_model_dir: Path) -> SimpleNamespace:
    """acme/tiny-llama (the tiny model), acme/vit (a vision encoder's config) and the
    dataset acme/sums in the hub cache; checked with huggingface_hub's own cache scan."""
    from huggingface_hub import scan_cache_dir
    from transformers import ViTConfig

    vit = tmp_path / "vit"
    ViTConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2).save_pretrained(vit)
    commits = {
        "acme/tiny-llama": offline_hub.add("acme/tiny-llama", tiny_model_dir),
        "acme/vit": offline_hub.add("acme/vit", vit),
        "acme/sums": offline_hub.add("acme/sums", _sums_repository(tmp_path / "sums"), "dataset"),
    }
    scan = scan_cache_dir(offline_hub.cache)
    assert not scan.warnings
    seen = {(repo.repo_type, repo.repo_id): repo for repo in scan.repos}
    assert set(seen) == {
        ("model", "acme/tiny-llama"),
        ("model", "acme/vit"),
        ("dataset", "acme/sums"),
    }
    for (_, repo_id), repo in seen.items():
        (revision,) = repo.revisions
        assert revision.commit_hash == commits[repo_id] and revision.refs == {"main"}
    config = tmp_path / "c.toml"
    config.write_text(
        '[model]\npath = "acme/tiny-llama"\n[data]\ntrain_path = "acme/sums"\n'
        '[[rewards]]\nfunction = "grpo.rewards:numeric_answer"\n'
        "[rollout]\ngroup_size = 2\nmax_new_tokens = 3\n"
        f'[train]\nsteps = 1\nprompts_per_step = 2\nrun_dir = "{tmp_path / "run"}"\n'
        "progress = false\n"
    )
    return SimpleNamespace(hub=offline_hub, commits=commits, config=config, tmp=tmp_path)


def test_hub_ids_train_and_evaluate_offline_from_the_cache(cached: SimpleNamespace) -> None:
    tmp = cached.tmp
    trained = _grpo(cached.hub, "train", str(cached.config), cwd=tmp)
    assert trained.returncode == 0, trained.stderr
    assert "acme/sums [train]: 6 prompts; policy acme/tiny-llama" in trained.stdout
    assert (tmp / "run" / "final" / "model.safetensors").is_file()
    pinned = f"acme/tiny-llama@{cached.commits['acme/tiny-llama']}"
    evaluated = _grpo(
        cached.hub,
        *("eval", pinned, "acme/sums", "--max-new-tokens", "2", "--json", str(tmp / "e.json")),
        *("--data.split=test", "--model.tokenizer_path=acme/tiny-llama@main"),
        cwd=tmp,
    )
    assert evaluated.returncode == 0, evaluated.stderr
    summary = json.loads((tmp / "e.json").read_text())
    assert (summary["data"], summary["prompts"]) == ("acme/sums [test]", 3)


def test_a_hub_id_missing_offline_is_one_line_and_exit_2(cached: SimpleNamespace) -> None:
    def stopped(model: str) -> str:
        """``grpo train`` with ``model.path = model``: exit 2, and its one line."""
        run = _grpo(
            cached.hub, "train", str(cached.config), f"--model.path={model}", cwd=cached.tmp
        )
        assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
        return run.stderr

    assert stopped("acme/gone") == (
        "grpo train: error: model.path: the Hub model 'acme/gone' is not in the hub cache and "
        "HF_HUB_OFFLINE is set: fetch it first with `hf download acme/gone` while online (or "
        "name a local folder or .gguf file)\n"
    )
    assert "`hf download acme/tiny-llama --revision v2`" in stopped("acme/tiny-llama@v2")
    assert stopped("acme/vit") == (
        "grpo train: error: model.path: acme/vit: a 'vit' model is not a causal LM "
        "(AutoModelForCausalLM)\n"
    )


def test_a_hub_dataset_missing_offline_is_one_line_and_exit_2(cached: SimpleNamespace) -> None:
    shutil.rmtree(cached.hub.cache / "datasets--acme--sums")
    missing = _grpo(cached.hub, "train", str(cached.config), cwd=cached.tmp)
    assert missing.returncode == 2
    assert missing.stderr.startswith("grpo train: error: acme/sums: the Hub dataset cannot be ")
    assert missing.stderr.endswith(
        "is not in the hub cache: fetch it first with `hf download acme/sums --repo-type "
        "dataset` while online\n"
    )
