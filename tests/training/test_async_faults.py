"""Rollout workers that die or hang: restarted with their requests answered once, or a loud
failure past ``rollout.max_worker_restarts``; never a silent hang. Real worker processes on
a tiny model."""

from __future__ import annotations

import os
import signal
import time

import pytest
import torch

from grpo.config import load_config
from grpo.models.weight_sync import weights_to_sync
from grpo.training.local_pool import LocalPool
from grpo.training.rollout_worker import WorkerSpec
from grpo.training.rounds import Request, Result
from grpo.training.worker_pool import RolloutWorkerError


@pytest.fixture(scope="module")
def spec(tiny_model_dir, arithmetic_jsonl, tmp_path_factory) -> WorkerSpec:
    config = load_config(
        None,
        [
            f"model.path='{tiny_model_dir}'",
            f"data.train_path='{arithmetic_jsonl}'",
            "rewards=[{function='grpo.rewards:numeric_answer'}]",
            "rollout.group_size=4",
            "rollout.max_new_tokens=48",
            f"train.run_dir='{tmp_path_factory.mktemp('run')}'",
        ],
    )
    return WorkerSpec(config, None, threads=1)


@pytest.fixture(scope="module")
def weights(tiny_model_dir) -> dict[str, torch.Tensor]:
    from transformers import AutoModelForCausalLM

    return weights_to_sync(AutoModelForCausalLM.from_pretrained(tiny_model_dir), full=True)


def _request(number: int) -> Request:
    return Request(number, step=1, indices=[0, 1], group_size=4, rows=slice(0, 8), noise=5)


def _answers(pool: LocalPool, numbers: set[int], timeout_s: float = 120) -> list[Result]:
    results: list[Result] = []
    deadline = time.monotonic() + timeout_s
    while {r.request.number for r in results} != numbers:
        assert time.monotonic() < deadline, "the pool never answered"
        results.extend(pool.poll(1.0))
    return results


def _wait_until(condition, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_a_killed_worker_is_restarted_and_its_requests_answered_once(spec, weights) -> None:
    pool = LocalPool(spec, 1, timeout_s=60, max_restarts=2)
    try:
        pool.publish(weights, 0)
        pool.submit(0, _request(0))
        pool.submit(0, _request(1))
        _wait_until(lambda: pool.busy(0))  # mid-rollout
        os.kill(pool.pids()[0], signal.SIGKILL)
        results = _answers(pool, {0, 1})
        assert pool.restarts == 1
        assert sorted(r.request.number for r in results) == [0, 1]  # each once
        first, second = (r.produced.rollout.completion_ids_BT for r in results)
        assert torch.equal(first, second)  # the same weights and noise after the restart
        assert all(r.version == 0 for r in results)
    finally:
        pool.close()


def test_a_hung_worker_trips_the_heartbeat_and_is_restarted(spec, weights) -> None:
    pool = LocalPool(spec, 1, timeout_s=3, max_restarts=1)
    try:
        pool.publish(weights, 0)
        pool.submit(0, _request(0))
        _answers(pool, {0})  # built and serving
        os.kill(pool.pids()[0], signal.SIGSTOP)  # hung: no heartbeat, no answer
        pool.submit(0, _request(1))
        assert [r.request.number for r in _answers(pool, {1})] == [1]
        assert pool.restarts == 1
    finally:
        pool.close()


def test_a_hung_worker_past_its_restarts_fails_loudly(spec, weights) -> None:
    pool = LocalPool(spec, 1, timeout_s=2, max_restarts=0)
    try:
        pool.publish(weights, 0)
        pool.submit(0, _request(0))
        _answers(pool, {0})
        os.kill(pool.pids()[0], signal.SIGSTOP)
        pool.submit(0, _request(1))
        started = time.monotonic()
        with pytest.raises(RolloutWorkerError, match=r"rollout worker 0 sent no heartbeat"):
            _answers(pool, {1})
        assert time.monotonic() - started < 30
    finally:
        pool.close()
    assert pool.pids() == []
