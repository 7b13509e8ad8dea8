"""Shared fixtures: a tiny random Llama and a character tokenizer, built locally (no downloads)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from subprocess import CompletedProcess
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from grpo.config import Config

# One torch thread, here and in every `grpo` subprocess the tests start (they inherit the
# environment): the tiny models gain nothing from more, and on a busy machine 2 threads on
# 2 cores ran a training step 3–14× slower than 1 (benchmarks/threads.py), which pushed the
# end-to-end tests past their timeouts.
os.environ["OMP_NUM_THREADS"] = "1"

WEIGHT_TOLERANCE = 1e-5  # 2 processes vs 1: float summation order only
JOB_TIMEOUT_S = 300  # generous: the CPU cores are shared
USER_CODE = Path(__file__).parent / "user_code"  # reward modules workers import by name


def pytest_configure(config: pytest.Config) -> None:
    import torch

    torch.set_num_threads(1)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Longest first: slow tests, those declaring the longest timeouts first, then the rest in
    file order. With several workers (scripts/test.sh) a minutes-long test that started last
    would leave the other workers idle while it runs alone."""

    def expected_length(item: pytest.Item) -> tuple[int, int]:
        timeout = item.get_closest_marker("timeout")
        declared = int(timeout.args[0]) if timeout and timeout.args else 0
        return (item.get_closest_marker("slow") is None, -declared)

    items.sort(key=expected_length)  # stable: file order within each class


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from grpo.demo.model import build_tiny_llama
    from grpo.demo.tokenizer import build_char_tokenizer

    directory = tmp_path_factory.mktemp("tiny_model")
    tokenizer = build_char_tokenizer(directory)
    build_tiny_llama(tokenizer, hidden_size=32, layers=2, heads=2, directory=directory)
    return directory


def run_shared_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of this test run's that every xdist worker sees (workers are processes of
    their own): the parent of the workers' temp dirs; without xdist, the run's own."""
    basetemp = tmp_path_factory.getbasetemp()
    return basetemp.parent if os.environ.get("PYTEST_XDIST_WORKER") else basetemp


@pytest.fixture(scope="session")
def demo_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The arithmetic demo's warm-started base, made by the demo's own warm start once per
    test run (about a minute) for every demo-length test: copied into a work dir as
    ``base/``, ``grpo demo`` reuses it (its ``warm_start.json``) instead of training it
    again. Made under a file lock, by whichever worker asks first."""
    from filelock import FileLock

    from grpo.demo.run import demo_warm_start

    shared = run_shared_dir(tmp_path_factory)
    base = shared / "demo_base"
    with FileLock(str(shared / "demo_base.lock")):
        if not (base / "warm_start.json").is_file():
            demo_warm_start(base, say=lambda _: None)
    return base


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    """SmolLM2-135M-Instruct's ``.gguf`` (the real model), from the grpo cache, where
    scripts/test.sh fetched it (or fetched here, once, under a file lock); the test skips,
    saying why, where it cannot be had or ``GRPO_NO_SMOLLM2`` is set."""
    from grpo.demo.smollm2 import FetchError, fetch_smollm2_gguf

    if os.environ.get("GRPO_NO_SMOLLM2"):
        pytest.skip("GRPO_NO_SMOLLM2 is set: the real-model tests skip")
    try:
        return fetch_smollm2_gguf()
    except FetchError as error:
        pytest.skip(f"SmolLM2-135M-Instruct cannot be had: {error}")


@pytest.fixture(scope="session")
def smollm2_tokenizer_dir(smollm2_gguf: Path) -> Path:
    """SmolLM2's real tokenizer (BPE, 49,152 tokens, ChatML template), as ``load_tokenizer``
    builds it from the GGUF, saved as a folder next to the file, once per transformers
    version: converting the GGUF's vocabulary takes seconds, loading the folder does not."""
    import transformers
    from filelock import FileLock

    from grpo.models.loading import load_tokenizer

    folder = smollm2_gguf.parent / f"tokenizer-transformers-{transformers.__version__}"
    with FileLock(str(smollm2_gguf.parent / ".tokenizer.lock")):
        if not (folder / "tokenizer_config.json").is_file():
            partial = folder.with_name(f"{folder.name}.partial")
            load_tokenizer(str(smollm2_gguf)).save_pretrained(str(partial))
            partial.rename(folder)
    return folder


@pytest.fixture(scope="session")
def smollm2_tiny_dir(tmp_path_factory: pytest.TempPathFactory, smollm2_tokenizer_dir: Path) -> Path:
    """A tiny random Llama (2 layers, width 32, tied embeddings) with SmolLM2's real
    tokenizer and chat template: a real BPE vocabulary at the cost of the tiny model."""
    from transformers import AutoTokenizer

    from grpo.demo.model import build_tiny_llama

    directory = tmp_path_factory.mktemp("smollm2_tiny")
    tokenizer = AutoTokenizer.from_pretrained(str(smollm2_tokenizer_dir))
    build_tiny_llama(
        tokenizer, hidden_size=32, layers=2, heads=2, max_positions=512, directory=directory
    )
    return directory


@pytest.fixture
def offline_hub(tmp_path: Path) -> SimpleNamespace:
    """A hub cache of our own, in huggingface_hub's layout, and the environment that makes
    a subprocess use it offline. ``add(repo_id, folder, repo_type="model")`` puts a folder's
    files in as the repository's ``main`` (``repo_folder_name(...)/refs/main`` → a commit,
    ``snapshots/<commit>/<file>`` → ``blobs/<sha256>``) and returns the commit; ``env`` has
    ``HF_HOME``, ``HF_HUB_CACHE`` (the cache), ``HF_DATASETS_CACHE`` and ``HF_HUB_OFFLINE=1``."""
    import hashlib
    import shutil

    from huggingface_hub.file_download import repo_folder_name

    cache = tmp_path / "hf" / "hub"

    def add(repo_id: str, folder: Path, repo_type: str = "model") -> str:
        repo = cache / repo_folder_name(repo_id=repo_id, repo_type=repo_type)
        commit = hashlib.sha1(f"{repo_type}/{repo_id}".encode()).hexdigest()
        for file in sorted(p for p in folder.rglob("*") if p.is_file()):
            blob = repo / "blobs" / hashlib.sha256(file.read_bytes()).hexdigest()
            blob.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(file, blob)
            link = repo / "snapshots" / commit / file.relative_to(folder)
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(os.path.relpath(blob, link.parent))
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / "main").write_text(commit)
        return commit

    env = {
        **os.environ,
        "HF_HOME": str(tmp_path / "hf"),
        "HF_HUB_CACHE": str(cache),
        "HF_DATASETS_CACHE": str(tmp_path / "hf" / "datasets"),
        "HF_HUB_OFFLINE": "1",
    }
    return SimpleNamespace(add=add, cache=cache, env=env)


@pytest.fixture(scope="session")
def arithmetic_jsonl(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from grpo.demo.task import make_splits, write_jsonl

    rows, _ = make_splits(64, 0, seed=1)
    return write_jsonl(rows, tmp_path_factory.mktemp("data") / "train.jsonl")


# The short run most training tests make: `overrides` come last, so they win.
TINY_RUN = (
    "rewards=[{function='grpo.rewards:numeric_answer'}]",
    "train.steps=2",
    "train.prompts_per_step=4",
    "rollout.group_size=4",
    "rollout.max_new_tokens=6",
    "optim.lr=1e-2",
    "train.progress=false",
)


@pytest.fixture(scope="session")
def tiny_config_at(tiny_model_dir: Path, arithmetic_jsonl: Path) -> Callable[..., Config]:
    """``make(run_dir, *overrides, model=None, data=None)``: the training Config of a short
    run of the tiny model on the arithmetic rows, writing to ``run_dir``: the accuracy reward
    (numeric_answer), 2 steps of 4 prompts × 4 completions of up to 6 tokens, lr 1e-2, no
    console lines; then ``overrides`` (``section.key=value``, as on the command line), which
    win. ``model`` and ``data`` stand in for the tiny model and the arithmetic rows. For
    module- and session-scoped fixtures; tests use ``tiny_config``."""
    from grpo.config import load_config

    def make(
        run_dir: Path, *overrides: str, model: Path | None = None, data: Path | None = None
    ) -> Config:
        return load_config(
            None,
            [
                f"model.path='{model or tiny_model_dir}'",
                f"data.train_path='{data or arithmetic_jsonl}'",
                *TINY_RUN,
                f"train.run_dir='{run_dir}'",
                *overrides,
            ],
        )

    return make


@pytest.fixture
def tiny_config(tiny_config_at: Callable[..., Config], tmp_path: Path) -> Callable[..., Config]:
    """``make(*overrides, run_dir=None, model=None, data=None)``: ``tiny_config_at``'s Config,
    its run in ``tmp_path / "run"`` unless ``run_dir`` says where."""

    def make(
        *overrides: str,
        run_dir: Path | None = None,
        model: Path | None = None,
        data: Path | None = None,
    ) -> Config:
        return tiny_config_at(run_dir or tmp_path / "run", *overrides, model=model, data=data)

    return make


@pytest.fixture(scope="session")
def user_code_dir() -> Path:
    """tests/user_code: the reward modules (``user_rewards.py``) that other processes (rollout
    workers, torchrun and Ray jobs) import by name, as a user's own: put it on their path."""
    return USER_CODE


@pytest.fixture
def user_rewards(monkeypatch: pytest.MonkeyPatch) -> str:
    """``user_rewards:digit_fraction``, importable by name here and in the asynchronous
    workers (spawned processes, which start with this process's ``sys.path``): a function
    defined in a test module cannot reach them."""
    monkeypatch.syspath_prepend(str(USER_CODE))
    return "user_rewards:digit_fraction"


@pytest.fixture(scope="session")
def trained_run_dir(
    tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path, arithmetic_jsonl: Path
) -> Path:
    """A real 4-step run of the tiny model with KL, two rewards (an accuracy reward, and one
    that varies between random completions so that groups train), held-out evaluation and
    a completion table every 2 steps: the input of the report, metric and glossary tests."""
    from grpo.config import load_config
    from grpo.rewards import numeric_answer
    from grpo.rewards.runner import RewardFunction
    from grpo.training.loop import train
    from tests.user_code.user_rewards import digit_fraction

    run_dir = tmp_path_factory.mktemp("trained") / "run"
    config = load_config(
        None,
        [
            f"--model.path={tiny_model_dir}",
            f"--data.train_path={arithmetic_jsonl}",
            '--rewards=[{ function = "grpo.rewards:numeric_answer" }]',
            f"--eval.path={arithmetic_jsonl}",
            "--eval.every=2",
            "--eval.max_new_tokens=4",
            "--rollout.group_size=4",
            "--rollout.max_new_tokens=6",
            "--algorithm.beta=0.04",
            "--optim.lr=1e-3",
            "--train.steps=4",
            "--train.prompts_per_step=2",
            "--train.completions_every=2",
            f"--train.run_dir={run_dir}",
        ],
    )
    rewards = [
        RewardFunction(name="numeric_answer", fn=numeric_answer),
        RewardFunction(name="digit_fraction", fn=digit_fraction, weight=0.5),
    ]
    train(config, reward_functions=rewards, verbose=False)
    return run_dir


@pytest.fixture
def gloo_jobs(tmp_path: Path) -> SimpleNamespace:
    """Real ``grpo train`` jobs in 1 process or under ``torchrun`` (gloo on CPU), run in
    tmp_path (its modules importable, and tests/user_code's), and their comparison: the
    2-processes-equal-1 tests of plain training and of agents share it.

    ``run(processes, name, config, *overrides)``: the job, into run dir tmp_path/name;
    ``GRPO_TEST_DUMP`` is tmp_path/name.dump, which a reward may append a JSON line to per
    call as ``{dump}.{RANK}``. ``steps(name, processes)``: per call (one per step or round),
    each key's lists joined over the ranks in rank order: the whole batch's rows.
    ``assert_same_run(one, two)``: the same metrics (times aside, rel 1e-5) and final
    weights within 1e-5; returns the first run's metrics."""

    def run(processes: int, name: str, config: Path, *overrides: str) -> CompletedProcess:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(
                [str(tmp_path), str(USER_CODE), os.environ.get("PYTHONPATH", "")]
            ),
            "OMP_NUM_THREADS": "1",
            "GRPO_TEST_DUMP": str(tmp_path / f"{name}.dump"),
        }
        for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
            env.pop(key, None)
        launcher = [sys.executable, "-m", "grpo"]
        if processes > 1:
            launcher = [
                *(sys.executable, "-m", "torch.distributed.run", "--standalone"),
                *("--nproc_per_node", str(processes), "-m", "grpo"),
            ]
        command = [*launcher, "train", str(config), f"--train.run_dir={tmp_path / name}"]
        return subprocess.run(
            [*command, *overrides],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=JOB_TIMEOUT_S,
        )

    def steps(name: str, processes: int) -> list[dict[str, list[Any]]]:
        per_rank = [
            [
                json.loads(line)
                for line in (tmp_path / f"{name}.dump.{rank}").read_text().splitlines()
            ]
            for rank in range(processes)
        ]
        return [
            {key: [v for record in records for v in record[key]] for key in records[0]}
            for records in zip(*per_rank, strict=True)
        ]

    def metrics(name: str) -> list[dict[str, float]]:
        lines = (tmp_path / name / "metrics.jsonl").read_text().splitlines()
        return [json.loads(line) for line in lines]

    def assert_same_run(one: str, two: str) -> list[dict[str, float]]:
        import torch
        from safetensors.torch import load_file

        metrics_1, metrics_2 = metrics(one), metrics(two)
        assert len(metrics_1) == len(metrics_2)
        for row_1, row_2 in zip(metrics_1, metrics_2, strict=True):
            assert set(row_1) == set(row_2)
            for key, value in row_1.items():
                if not (key.startswith("time/") or key.endswith("/seconds")):
                    assert row_2[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
        weights_1 = load_file(tmp_path / one / "final" / "model.safetensors")
        weights_2 = load_file(tmp_path / two / "final" / "model.safetensors")
        assert weights_1.keys() == weights_2.keys()
        for key, tensor in weights_1.items():
            assert torch.allclose(tensor, weights_2[key], atol=WEIGHT_TOLERANCE, rtol=0), key
        return metrics_1

    return SimpleNamespace(
        run=run, steps=steps, metrics=metrics, assert_same_run=assert_same_run, tmp_path=tmp_path
    )


@pytest.fixture
def chromium_tab() -> Iterator[tuple[Any, list[str]]]:
    """A tab of the system's headless Chromium, driven by playwright (nothing is downloaded),
    and the list its console errors, uncaught exceptions and failed loads go to. Skips, saying
    why, where no Chromium is installed (scripts/test.sh installs Debian's when it can)."""
    names = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
    executable = next((found for name in names if (found := shutil.which(name))), None)
    if executable is None:
        pytest.skip("no Chromium found (scripts/test.sh installs Debian's `chromium` when it can)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright (the dev extra)")
    errors: list[str] = []
    with sync_api.sync_playwright() as playwright:
        # No sandbox: tests may run as root.
        browser = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        try:
            tab = browser.new_page()
            tab.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            tab.on("pageerror", lambda error: errors.append(f"uncaught: {error}"))
            yield tab, errors
        finally:
            browser.close()
