"""``algorithm.off_policy`` from the config to the update: ``auto`` resolves from the rollout
mode and the staleness bound, combinations that make no sense are refused, and on the tiny
model the decoupled and sampler objectives update the weights as their formulas say."""

from __future__ import annotations

import copy
import dataclasses
import math

import pytest
import torch

from grpo.algo.corrections import CorrectionSettings
from grpo.algo.objective import Objective
from grpo.config import ConfigError, load_config
from grpo.training.setup_learner import build_objective
from grpo.training.update.policy import TrainBatch
from tests.training.update.sgd import sgd_update

BASE = [
    "model.path='unused'",
    "data.train_path='unused.jsonl'",
    "rewards=[{function='grpo.rewards:numeric_answer'}]",
]


def _objective(*overrides: str) -> Objective:
    return build_objective(load_config(None, [*BASE, *overrides]))


def test_auto_resolves_from_the_rollout_mode_and_the_staleness() -> None:
    sync = _objective()
    assert sync.off_policy == "none"
    assert _objective("rollout.mode='async'", "rollout.max_staleness=0").off_policy == "none"
    assert _objective("rollout.mode='async'", "rollout.max_staleness=1").off_policy == "decoupled"
    explicit = _objective("rollout.mode='async'", "algorithm.off_policy='sampler'")
    assert explicit.off_policy == "sampler"
    # At k = 0 the objective is the synchronous one, field for field (so are the results).
    at_zero = _objective("rollout.mode='async'", "rollout.max_staleness=0")
    assert at_zero == sync
    # The decoupled cap is the sampler correction's C.
    capped = _objective("rollout.mode='async'", "algorithm.sampler_is_cap=5")
    assert (capped.off_policy, capped.correction.is_cap) == ("decoupled", 5.0)


GSPO_AGAINST_BEHAVIOUR = [
    "rollout.mode='async'",
    "algorithm.off_policy='sampler'",
    "algorithm.ratio_level='sequence'",
]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["algorithm.off_policy='decoupled'"], "needs rollout.mode = 'async'"),
        (GSPO_AGAINST_BEHAVIOUR, "off_policy = 'sampler' with algorithm.ratio_level = 'sequence'"),
    ],
)
def test_senseless_combinations_are_refused(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(None, [*BASE, *overrides])
    # GSPO against π_prox is fine.
    decoupled = _objective("rollout.mode='async'", "algorithm.ratio_level='sequence'")
    assert (decoupled.off_policy, decoupled.ratio_level) == ("decoupled", "sequence")


def _batch(model) -> TrainBatch:
    """Six rows of random tokens and advantages; behaviour log-probs = the model's own."""
    from grpo.models.logprobs import completion_logprobs

    generator = torch.Generator().manual_seed(0)
    rows, vocab = 6, model.config.vocab_size
    lengths = torch.tensor([5, 1, 3, 2, 5, 4])
    completion_mask = (torch.arange(5)[None, :] < lengths[:, None]).long()
    prompt_ids = torch.randint(3, vocab, (rows, 3), generator=generator)
    prompt_mask = torch.ones(rows, 3, dtype=torch.long)
    completion_ids = torch.randint(3, vocab, (rows, 5), generator=generator) * completion_mask
    with torch.no_grad():
        logp, _ = completion_logprobs(
            model, prompt_ids, prompt_mask, completion_ids, completion_mask
        )
    return TrainBatch(
        prompt_ids_BP=prompt_ids,
        prompt_mask_BP=prompt_mask,
        completion_ids_BT=completion_ids,
        completion_mask_BT=completion_mask,
        advantages_BT=torch.randn(rows, generator=generator)[:, None].expand(-1, 5),
        sampler_logp_BT=logp * completion_mask,
    )


def _shifted(batch: TrainBatch, shift_BT: torch.Tensor | float) -> TrainBatch:
    """The batch with π_behav = π_prox · e^shift on its real tokens."""
    behav = (batch.sampler_logp_BT + shift_BT) * batch.completion_mask_BT
    return dataclasses.replace(batch, sampler_logp_BT=behav)


def _update(model, batch: TrainBatch, objective: Objective, micro: int = 6) -> dict[str, float]:
    return sgd_update(model, batch, objective, lr=0.1, micro=micro)


def _deltas(base, model) -> list[torch.Tensor]:
    """What the update changed, parameter by parameter."""
    pairs = zip(base.parameters(), model.parameters(), strict=True)
    return [after - before for before, after in pairs]


def test_decoupled_weights_the_update_by_the_truncated_behaviour_ratio(tiny_model_dir) -> None:
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    batch = _batch(base)
    objective = Objective(max_completion_length=5, aggregation="token")
    plain = copy.deepcopy(base)
    _update(plain, batch, objective)
    decoupled = dataclasses.replace(objective, off_policy="decoupled")
    # π_behav = π_prox: weight 1, the update of the synchronous objective.
    same = copy.deepcopy(base)
    _update(same, batch, decoupled)
    for p_same, p_plain in zip(same.parameters(), plain.parameters(), strict=True):
        assert torch.allclose(p_same, p_plain, atol=1e-7)
    # π_prox/π_behav = 3 on every token, capped at C = 2: at μ = 1 the gradient, and so the
    # SGD step, is twice the synchronous one.
    doubled = copy.deepcopy(base)
    _update(doubled, _shifted(batch, -math.log(3.0)), decoupled)
    for d_doubled, d_plain in zip(_deltas(base, doubled), _deltas(base, plain), strict=True):
        assert torch.allclose(d_doubled, 2.0 * d_plain, atol=1e-6, rtol=1e-4)


def test_sampler_takes_the_ratio_against_the_behaviour_policy(tiny_model_dir) -> None:
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    batch = _shifted(_batch(base), -math.log(3.0))  # π_θ/π_behav = 3 at the first pass
    objective = Objective(max_completion_length=5, aggregation="token", off_policy="sampler")
    metrics = _update(copy.deepcopy(base), batch, objective)
    assert metrics["ratio_min"] == pytest.approx(3.0, rel=1e-4)
    assert metrics["ratio_max"] == pytest.approx(3.0, rel=1e-4)
    positive = (batch.advantages_BT > 0) & batch.completion_mask_BT.bool()
    share = float(positive.sum() / batch.completion_mask_BT.sum())
    assert metrics["clip_frac_high"] == pytest.approx(share)  # every A > 0 token is clipped
    assert not any(key.startswith("sampler/") for key in metrics)  # no correction: no keys


@pytest.mark.parametrize(
    "settings",
    [
        {"off_policy": "decoupled"},
        {"off_policy": "decoupled", "correction": CorrectionSettings("mis", 0.5, 0.6, 1.5)},
        {"off_policy": "sampler", "correction": CorrectionSettings("tis", is_cap=1.5)},
    ],
)
def test_micro_batches_still_give_the_one_batch_update(tiny_model_dir, settings) -> None:
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    batch = _shifted(_batch(base), torch.linspace(-0.8, 0.8, 30).reshape(6, 5))
    objective = Objective(
        max_completion_length=5, aggregation="token", inner_iterations=2, **settings
    )
    one, three = copy.deepcopy(base), copy.deepcopy(base)
    one_metrics = _update(one, batch, objective, micro=6)
    three_metrics = _update(three, batch, objective, micro=2)
    for (name, p1), p3 in zip(one.named_parameters(), three.parameters(), strict=True):
        assert torch.allclose(p1, p3, atol=1e-6), name
    for key, value in one_metrics.items():
        assert three_metrics[key] == pytest.approx(value, abs=1e-5), key
