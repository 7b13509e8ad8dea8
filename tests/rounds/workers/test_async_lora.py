"""Async + LoRA: the workers get the adapter alone after the first sync, and their
effective weights (frozen base + adapter) are the learner's: the trap of verl#7495, where
only the frozen base reached the sampler."""

from __future__ import annotations

import copy

import pytest
import torch
from safetensors.torch import load_file

from grpo.models.loading import load_policy, trainable_spec
from grpo.models.weight_sync import sync_bytes, weights_to_sync
from grpo.rounds.workers.worker import WorkerSpec, build_worker, load_weights
from grpo.training.loop import train


@pytest.fixture(autouse=True)
def _rewards(user_rewards) -> None:
    pass


SETTINGS = (  # over tiny_config's
    "rewards=[{function='user_rewards:digit_fraction'}]",
    "model.lora_rank=4",
    "train.steps=3",
    "optim.lr=5e-2",
)


def _effective(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Base + adapter, merged: the weights the model samples with."""
    return copy.deepcopy(model).merge_and_unload().state_dict()


def _train_a_little(model: torch.nn.Module, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.requires_grad:
                parameter.add_(0.1 * torch.randn(parameter.shape, generator=generator))


def test_a_worker_samples_with_base_plus_the_learners_adapter(tiny_config, tiny_model_dir) -> None:
    config = tiny_config(*SETTINGS)
    learner = load_policy(str(tiny_model_dir), torch.device("cpu"), trainable_spec(config.model))
    worker = build_worker(WorkerSpec(config, None, threads=1), 0)
    _train_a_little(learner, 0)
    full = weights_to_sync(learner, full=True)
    load_weights(worker, full, 0)
    _train_a_little(learner, 1)
    adapter = weights_to_sync(learner, full=False)
    assert adapter and all("lora_" in name for name in adapter)  # the adapter alone travels
    assert sync_bytes(adapter) < sync_bytes(full) / 4
    load_weights(worker, adapter, 1)
    want, got = _effective(learner), _effective(worker.policy)
    assert want.keys() == got.keys()
    for name in want:
        assert torch.equal(want[name], got[name]), name
    base = _effective(
        load_policy(str(tiny_model_dir), torch.device("cpu"), trainable_spec(config.model))
    )
    assert any(not torch.equal(want[n], base[n]) for n in want)  # the adapter does change them


def test_async_lora_at_staleness_zero_is_sync_lora(tiny_config, tmp_path):
    sync = train(tiny_config(*SETTINGS, run_dir=tmp_path / "sync"), verbose=False)
    overlapped = train(
        tiny_config(
            *SETTINGS,
            "rollout.mode='async'",
            "rollout.max_staleness=0",
            run_dir=tmp_path / "async",
        ),
        verbose=False,
    )
    name = "final/model.safetensors"
    a, b = load_file(sync.run_dir / name), load_file(overlapped.run_dir / name)
    assert all(torch.equal(a[k], b[k]) for k in a)
    first, later = overlapped.history[0], overlapped.history[1:]
    assert all(row["async/sync_bytes"] < first["async/sync_bytes"] / 4 for row in later)
    assert all(row["sampler_logp_gap"] < 1e-5 for row in overlapped.history)
