"""The prompt sampler's epoch order and its resumable cursor."""

from grpo.data.sampler import PromptSampler


def test_sampler_covers_each_epoch_and_resumes_exactly() -> None:
    sampler = PromptSampler(size=10, seed=3)
    first_epoch = sampler.next_indices(10)
    assert sorted(first_epoch) == list(range(10))
    partial = sampler.next_indices(4)
    state = sampler.state_dict()
    expected = sampler.next_indices(9)
    resumed = PromptSampler(size=10, seed=3)
    resumed.load_state_dict(state)
    assert resumed.next_indices(9) == expected
    assert partial + expected[:6] != first_epoch  # a new shuffle each epoch
