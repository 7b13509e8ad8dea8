"""The Ray backend of the rollout workers against a real Ray cluster of 2 simulated nodes
(``ray.cluster_utils.Cluster``, 1 CPU each), shared by the module: results equal the
worker's own ``serve`` in this process, bit for bit; a killed actor is restarted and its
request answered once; too many restarts, a hung request and a worker's exception fail the
run naming the worker; training with 2 actors on the 2 nodes is the local backend's run.
A pool that starts its own instance (in a subprocess) shuts it down and keeps the workers'
output off the console.

Reward functions reach the actors' processes by module path (a config entry: grpo's own,
or the user_code folder the job's runtime environment puts on their PYTHONPATH) or by
value: cloudpickle sends a function defined inside another function whole, so the nested
ones below need no importable test module on the workers' side."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

ray = pytest.importorskip("ray")

from ray.cluster_utils import Cluster  # noqa: E402
from ray.exceptions import RayActorError  # noqa: E402

from grpo.config import Config, load_config  # noqa: E402
from grpo.models.weight_sync import weights_to_sync  # noqa: E402
from grpo.rewards.runner import RewardError, RewardFunction  # noqa: E402
from grpo.rounds.workers.chunks import ChunkRequest, ChunkResult  # noqa: E402
from grpo.rounds.workers.pool import WorkerError  # noqa: E402
from grpo.rounds.workers.ray_pool import RayPool, actor_options, init_address  # noqa: E402
from grpo.rounds.workers.worker import (  # noqa: E402
    WorkerSpec,
    build_worker,
    load_weights,
    serve,
)

POLL_S = 300.0  # an actor's start (a fresh process importing torch) takes seconds here; on 2
# cores shared with a CPU-bound process the first actor of a cluster took over 120 s
TIMED, SECONDS = ("time/", "async/"), "/seconds"  # metrics that differ between runs


@pytest.fixture(scope="module")
def cluster(user_code_dir: Path) -> Iterator[Cluster]:
    """Two nodes of 1 CPU, this process their driver; shut down after the module. The
    job's workers find ``user_code_dir`` on their PYTHONPATH (a runtime environment)."""
    if ray.is_initialized():
        ray.shutdown()
    nodes = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "object_store_memory": 100 * 2**20},
    )
    try:
        nodes.add_node(num_cpus=1, object_store_memory=100 * 2**20)
        nodes.wait_for_nodes()
        ray.init(
            address=nodes.address,
            log_to_driver=False,
            logging_level="warning",
            runtime_env={"env_vars": {"PYTHONPATH": str(user_code_dir)}},
        )
        yield nodes
    finally:
        ray.shutdown()
        nodes.shutdown()


@pytest.fixture(scope="module")
def config(tiny_model_dir: Path, arithmetic_jsonl: Path) -> Config:
    return load_config(
        None,
        [
            f"model.path='{tiny_model_dir}'",
            "model.device='cpu'",
            f"data.train_path='{arithmetic_jsonl}'",
            "rewards=[{function='grpo.rewards:numeric_answer'}]",
            "rollout.group_size=4",
            "rollout.max_new_tokens=6",
            "rollout.mode='async'",
            "rollout.backend='ray'",
        ],
    )


@pytest.fixture(scope="module")
def weights(config: Config) -> dict[str, torch.Tensor]:
    """The policy's full state, moved off its initialisation (so loading them matters)."""
    state = build_worker(WorkerSpec(config, None, threads=1), 0)
    generator = torch.Generator().manual_seed(3)
    return {
        name: t + 0.05 * torch.randn(t.shape, generator=generator) if t.is_floating_point() else t
        for name, t in weights_to_sync(state.policy, full=True).items()
    }


@pytest.fixture(scope="module")
def expected(
    config: Config, weights: dict[str, torch.Tensor]
) -> Callable[[ChunkRequest], ChunkResult]:
    """What ``serve`` answers in this process, with ``weights`` as version 5."""
    state = build_worker(WorkerSpec(config, None, threads=1), 0)
    load_weights(state, weights, 5)
    return lambda request: serve(state, request)


def request(
    number: int, indices: list[int], rows: slice, noise: torch.Tensor | int
) -> ChunkRequest:
    return ChunkRequest(number, step=0, indices=indices, group_size=4, rows=rows, noise=noise)


def assert_same_rows(got: ChunkResult, want: ChunkResult, *, scores: bool = True) -> None:
    for name in ("prompt_ids_BP", "prompt_mask_BP", "completion_ids_BT", "completion_mask_BT"):
        assert torch.equal(
            getattr(got.rows.local_rollout, name), getattr(want.rows.local_rollout, name)
        )
    assert torch.equal(
        got.rows.local_rollout.sampler_logp_BT, want.rows.local_rollout.sampler_logp_BT
    )
    assert got.rows.local_completions == want.rows.local_completions
    assert torch.equal(got.generator_state, want.generator_state)
    assert got.version == want.version
    if scores:
        assert torch.equal(got.rows.local_scores.total_B, want.rows.local_scores.total_B)


def poll_all(pool: RayPool, count: int) -> list[ChunkResult]:
    results: list[ChunkResult] = []
    deadline = time.monotonic() + POLL_S
    while len(results) < count and time.monotonic() < deadline:
        results.extend(pool.poll(deadline - time.monotonic()))
    assert len(results) == count, f"{len(results)} of {count} results within {POLL_S} s"
    return results


def sleeping(seconds: float) -> Callable[..., list[float]]:
    def sleepy(prompts: list[str], completions: list[str], **_: object) -> list[float]:
        time.sleep(seconds)
        return [0.0] * len(completions)

    return sleepy


def failing() -> Callable[..., list[float]]:
    def broken(prompts: list[str], completions: list[str], **_: object) -> list[float]:
        raise ValueError("the reward broke on purpose")

    return broken


def test_ray_address_follows_ray_init() -> None:
    assert init_address("") is None  # RAY_ADDRESS, else a `ray start` cluster, else a new one
    assert init_address("auto") == "auto"
    assert init_address("ray://head:10001") == "ray://head:10001"


def test_without_ray_the_error_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)
    monkeypatch.delitem(sys.modules, "grpo.rounds.workers.ray_pool")
    with pytest.raises(ImportError, match=r"pip install 'grpo\[ray\]'"):
        importlib.import_module("grpo.rounds.workers.ray_pool")


def test_actors_spread_over_nodes_with_a_cpu_per_torch_thread(config: Config) -> None:
    options = actor_options(WorkerSpec(config, None, threads=3))
    assert options["scheduling_strategy"] == "SPREAD"
    assert (options["num_cpus"], options["num_gpus"], options["max_restarts"]) == (3, 0, 0)


def test_results_equal_serve_in_this_process(cluster, config, weights, expected) -> None:
    pool = RayPool(WorkerSpec(config, None, threads=1), 1, timeout_s=60, max_restarts=0)
    try:
        pool.publish(weights, 5)
        asked = request(0, [0, 1], slice(0, 8), noise=1234)
        pool.submit(0, asked)
        (result,) = poll_all(pool, 1)
        assert (result.request, result.worker) == (asked, 0)
        assert_same_rows(result, expected(asked))
        assert pool.restarts == 0
        actor = pool.actors()[0]
    finally:
        pool.close()
    pool.close()  # idempotent
    assert ray.is_initialized()  # this module's instance: not the pool's to shut down
    assert _dies_soon(actor)  # nothing left running


def _dies_soon(actor, timeout_s: float = 60) -> bool:
    """Whether ``actor`` is gone within ``timeout_s`` (``ray.kill`` acts asynchronously)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            ray.get(actor.node.remote(), timeout=10)
        except RayActorError:
            return True
        time.sleep(0.2)
    return False


def test_two_workers_on_two_nodes_equal_local_results(cluster, config, weights, expected) -> None:
    """2 workers, one per node; a round cut in two chunks, noise a generator state."""
    pool = RayPool(WorkerSpec(config, None, threads=1), 2, timeout_s=60, max_restarts=0)
    try:
        nodes = pool.nodes()  # (1 CPU a node would force this without SPREAD too)
        assert len(set(nodes)) == 2
        assert set(nodes) == {node["NodeID"] for node in ray.nodes() if node["Alive"]}
        pool.publish(weights, 5)
        noise = torch.Generator().manual_seed(7).get_state()
        asked = [
            request(0, [2, 3, 4], slice(0, 8), noise),
            request(1, [2, 3, 4], slice(8, 12), 99),
        ]
        for worker, one in enumerate(asked):
            pool.submit(worker, one)
        results = sorted(poll_all(pool, 2), key=lambda result: result.request.number)
        assert [result.worker for result in results] == [0, 1]
        for result, one in zip(results, asked, strict=True):
            assert_same_rows(result, expected(one))
    finally:
        pool.close()


def test_a_killed_worker_is_restarted_and_its_request_answered_once(
    cluster, config, weights, expected
) -> None:
    rewards = [RewardFunction(name="sleepy", fn=sleeping(3.0))]
    pool = RayPool(WorkerSpec(config, rewards, threads=1), 1, timeout_s=60, max_restarts=1)
    try:
        # a full sync with the final norm zeroed, then a partial one with the norm alone:
        # the restarted actor must get both, merged (the worker's own weights, version 5)
        pool.publish({**weights, "model.norm.weight": torch.zeros(32)}, 4)
        pool.publish({"model.norm.weight": weights["model.norm.weight"]}, 5)
        pool.nodes()  # started
        asked = request(0, [0, 1], slice(0, 8), noise=1234)
        pool.submit(0, asked)
        time.sleep(1.0)  # in its reward's 3 s
        ray.kill(pool.actors()[0])
        (result,) = poll_all(pool, 1)
        assert pool.restarts == 1
        assert result.request == asked
        assert_same_rows(result, expected(asked), scores=False)  # sampled again, same noise
        assert pool.poll(1.0) == []  # once
    finally:
        pool.close()


def test_too_many_restarts_fail_naming_the_worker(cluster, config, weights) -> None:
    rewards = [RewardFunction(name="sleepy", fn=sleeping(30.0))]
    pool = RayPool(WorkerSpec(config, rewards, threads=1), 1, timeout_s=60, max_restarts=0)
    try:
        pool.publish(weights, 5)
        pool.submit(0, request(0, [0, 1], slice(0, 8), noise=1234))
        pool.nodes()
        time.sleep(1.0)  # in its reward's 30 s
        ray.kill(pool.actors()[0])
        with pytest.raises(WorkerError, match=r"rollout worker 0 died on request 0") as e:
            poll_all(pool, 1)
        assert "rollout.max_worker_restarts = 0" in str(e.value)
    finally:
        pool.close()


def test_a_worker_error_fails_with_its_traceback(cluster, config, weights) -> None:
    """A reward that raises in a worker is the run's RewardError, as in the learner: its
    line, the user's frames and (for --debug) the worker's whole traceback travel with it."""
    rewards = [RewardFunction(name="broken", fn=failing())]
    pool = RayPool(WorkerSpec(config, rewards, threads=1), 1, timeout_s=60, max_restarts=3)
    try:
        pool.publish(weights, 5)
        pool.submit(0, request(0, [0, 1], slice(0, 8), noise=1234))
        with pytest.raises(
            RewardError,
            match=r"reward 'broken': .*row \d+, completion 1 of 4: raised ValueError: the",
        ) as e:
            poll_all(pool, 1)
        assert 'raise ValueError("the reward broke on purpose")' in e.value.frames
        assert "grpo/rewards/runner.py" not in e.value.frames  # the user's frames only
        assert "grpo/rewards/runner.py" in e.value.full_traceback  # the whole, for --debug
        assert pool.restarts == 0
    finally:
        pool.close()


def test_a_hung_request_is_restarted_then_fails_past_the_limit(cluster, config, weights) -> None:
    rewards = [RewardFunction(name="sleepy", fn=sleeping(600.0))]
    pool = RayPool(WorkerSpec(config, rewards, threads=1), 1, timeout_s=2.0, max_restarts=1)
    try:
        pool.publish(weights, 5)
        pool.submit(0, request(0, [0, 1], slice(0, 8), noise=1234))
        with pytest.raises(WorkerError, match=r"rollout worker 0 spent \d+ s on request 0"):
            poll_all(pool, 1)
        assert pool.restarts == 1
    finally:
        pool.close()


OWN_INSTANCE = """
import sys, ray, torch
from grpo.config import load_config
from grpo.rounds.workers.ray_pool import RayPool
from grpo.rounds.workers.worker import WorkerSpec
from grpo.rounds.workers.chunks import ChunkRequest

config = load_config(None, sys.argv[1:])
pool = RayPool(WorkerSpec(config, None, threads=1), 1, timeout_s=60, max_restarts=0)
pool.publish({}, 0)
pool.submit(0, ChunkRequest(0, step=0, indices=[0], group_size=4, rows=slice(0, 4), noise=1))
results = []
while not results:
    results = pool.poll(60)
pool.close()
print("rows", results[0].rows.local_rollout.completion_ids_BT.shape[0])
print("initialised after close", ray.is_initialized())
"""


def test_a_pool_that_started_ray_shuts_it_down_and_keeps_worker_logs_quiet(
    tiny_model_dir: Path, arithmetic_jsonl: Path
) -> None:
    """ray_address = "local": a new instance of the pool's own (in a process of its own:
    this one is the module cluster's driver), gone after close; the workers' output (their
    model loading bars, say) is not relayed to the learner's console."""
    done = subprocess.run(
        [
            *(sys.executable, "-c", OWN_INSTANCE),
            *(f"model.path='{tiny_model_dir}'", "model.device='cpu'"),
            *(f"data.train_path='{arithmetic_jsonl}'", "rollout.group_size=4"),
            *("rollout.max_new_tokens=4", "rollout.ray_address='local'"),
            "rewards=[{function='grpo.rewards:numeric_answer'}]",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rows 4\ninitialised after close False" in done.stdout
    assert "WorkerActor pid=" not in done.stdout + done.stderr


@pytest.mark.slow
def test_training_on_two_nodes_is_the_local_backend_run(
    cluster, tiny_config, user_rewards, tmp_path
) -> None:
    """max_staleness 0, 2 workers: local processes and Ray actors on 2 nodes train the
    same weights and log the same metrics (times aside)."""
    from grpo.training.loop import train

    def run(backend: str) -> tuple[dict[str, torch.Tensor], list[dict[str, float]]]:
        run_dir = tmp_path / backend
        config = tiny_config(  # user_rewards: importable by the local (spawned) workers too
            f"rewards=[{{function='{user_rewards}'}}, "
            "{function='grpo.rewards:numeric_answer', weight=0.5}]",
            *("train.steps=3", "train.sequences_per_micro_batch=8", "algorithm.beta=0.05"),
            *("rollout.mode='async'", "rollout.max_staleness=0", "rollout.workers=2"),
            f"rollout.backend='{backend}'",
            run_dir=run_dir,
        )
        train(config, verbose=False)
        rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        untimed = [
            {k: v for k, v in row.items() if not k.startswith(TIMED) and not k.endswith(SECONDS)}
            for row in rows
        ]
        return load_file(str(run_dir / "final" / "model.safetensors")), untimed

    local_weights, local_metrics = run("local")
    ray_weights, ray_metrics = run("ray")
    assert ray_metrics == local_metrics
    assert local_metrics[-1]["reward/std"] > 0  # the groups trained
    assert ray_weights.keys() == local_weights.keys()
    for name, tensor in local_weights.items():
        assert torch.equal(ray_weights[name], tensor), name
