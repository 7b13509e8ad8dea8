"""Rollout workers that die or hang: restarted with their requests answered once, or a loud
failure past ``rollout.max_worker_restarts``; never a silent hang. Real worker processes on
a tiny model."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
import torch

from grpo.config import load_config
from grpo.models.weight_sync import weights_to_sync
from grpo.rounds.workers.chunks import ChunkRequest, ChunkResult
from grpo.rounds.workers.local_pool import LocalPool
from grpo.rounds.workers.pool import WorkerError
from grpo.rounds.workers.worker import WorkerSpec


def _spec(model_dir, train_path, run_dir) -> WorkerSpec:
    config = load_config(
        None,
        [
            f"model.path='{model_dir}'",
            f"data.train_path='{train_path}'",
            "rewards=[{function='grpo.rewards:numeric_answer'}]",
            "rollout.group_size=4",
            "rollout.max_new_tokens=48",
            f"train.run_dir='{run_dir}'",
        ],
    )
    return WorkerSpec(config, None, threads=1)


@pytest.fixture(scope="module")
def spec(tiny_model_dir, arithmetic_jsonl, tmp_path_factory) -> WorkerSpec:
    return _spec(tiny_model_dir, arithmetic_jsonl, tmp_path_factory.mktemp("run"))


@pytest.fixture(scope="module")
def large_answer_spec(tiny_model_dir, arithmetic_jsonl, tmp_path_factory) -> WorkerSpec:
    """Rows that carry a 64 KiB column (a code task's test cases, say): an answer on 2
    prompts is 128 KiB, more than a pipe holds, so sending it takes the learner reading it."""
    folder = tmp_path_factory.mktemp("large")
    rows = [json.loads(line) for line in arithmetic_jsonl.read_text().splitlines()]
    lines = [json.dumps({**row, "tests": "x" * 65536}) for row in rows]
    (folder / "train.jsonl").write_text("\n".join(lines) + "\n")
    return _spec(tiny_model_dir, folder / "train.jsonl", folder / "run")


@pytest.fixture(scope="module")
def weights(tiny_model_dir) -> dict[str, torch.Tensor]:
    from transformers import AutoModelForCausalLM

    return weights_to_sync(AutoModelForCausalLM.from_pretrained(tiny_model_dir), full=True)


def _request(number: int) -> ChunkRequest:
    return ChunkRequest(number, step=1, indices=[0, 1], group_size=4, rows=slice(0, 8), noise=5)


def _answers(pool: LocalPool, numbers: set[int], timeout_s: float = 120) -> list[ChunkResult]:
    results: list[ChunkResult] = []
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
        first, second = (r.rows.local_rollout.completion_ids_BT for r in results)
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


def test_a_worker_hung_while_sending_leaves_its_replacement_and_the_others_answering(
    large_answer_spec, weights
) -> None:
    """A worker stopped or killed partway through sending an answer must not silence the
    pool: each worker answers on a channel of its own. (On one shared queue the stopped
    worker kept the queue's write lock and half a message: the learner blocked reading the
    message, and every other worker, the replacement too, waited for the lock forever.)"""
    pool = LocalPool(large_answer_spec, 2, timeout_s=3, max_restarts=1)
    try:
        pool.publish(weights, 0)
        pool.submit(0, _request(0))  # 128 KiB, while the learner is not polling
        _wait_until(lambda: pool.busy(0))
        _wait_until(lambda: not pool.busy(0))
        time.sleep(1.0)  # sending, or sent
        os.kill(pool.pids()[0], signal.SIGSTOP)
        pool.submit(0, _request(1))
        pool.submit(1, _request(2))
        results = _answers(pool, {0, 1, 2})
        assert sorted(r.request.number for r in results) == [0, 1, 2]  # each once
        assert pool.restarts == 1
        assert all(len(r.rows.local_columns["tests"][0]) == 65536 for r in results)
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
        with pytest.raises(WorkerError, match=r"rollout worker 0 sent no heartbeat"):
            _answers(pool, {1})
        assert time.monotonic() - started < 30
    finally:
        pool.close()
    assert pool.pids() == []
