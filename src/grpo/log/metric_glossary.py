"""What each metric means: the metrics glossary's text, one entry per key of the metric table.

The docs page ``docs/reference/metrics.md`` is generated from this dictionary, in its order
(``grpo docs --write docs``), and tests keep the two sources agreeing: every key of
:data:`grpo.log.metric_table.METRICS` has a meaning here, and every key here is a row of
the table, an instance of one of its patterns (``reward/total/mean`` of
``reward/<name>/mean``), or ``step``. A new metric gets its row in the table and its
meaning here, in the place where a reader of the glossary looks for it.
"""

from __future__ import annotations

MEANINGS: dict[str, str] = {
    "step": "the training step (0 holds the held-out accuracy before training)",
    "reward/mean": "mean total (weighted) reward over the step's completions",
    "reward/std": "its population standard deviation over the step",
    "reward/<name>/mean": "mean of one reward function over the rows it scored",
    "reward/<name>/std": "its standard deviation",
    "reward/<name>/errors": "rows whose value was substituted (`on_error` = zero or skip_group)",
    "reward/<name>/seconds": "wall-clock seconds the function took this step",
    "reward/total/mean": "the weighted total, as `reward/mean`",
    "reward/total/std": "its standard deviation",
    "reward/total/errors": "substituted rows over all functions",
    "reward/total/seconds": "seconds to score the step (functions run concurrently)",
    "accuracy": (
        "fraction of the step's completions the accuracy reward (`accuracy = true`, else the "
        "first built-in one; or an agent environment's reward, when it is the only reward or with"
        " `agent.environment_accuracy = true`) scores ≥ 1"
    ),
    "eval/accuracy": (
        "held-out greedy accuracy (`eval.path`), before training and every `eval.every` steps"
    ),
    "zero_variance_frac": (
        "fraction of groups whose G rewards are all equal: zero advantage, dropped, no signal"
    ),
    "skipped_groups": 'groups left out because a reward failed with `on_error = "skip_group"`',
    "skipped_updates": (
        "optimizer updates skipped this step because the loss or gradient norm was not finite "
        "(weights and AdamW state untouched; `train.max_consecutive_skips` in a row stop the run)"
    ),
    "groups_trained": "groups that went into the update",
    "generation_rounds": (
        "rounds of prompts generated this step (> 1 only with `algorithm.dynamic_sampling`)"
    ),
    "groups/all_correct_frac": (
        "fraction of groups whose completions all succeeded (accuracy ≥ 1, else reward clamped to"
        " [0, 1])"
    ),
    "groups/all_wrong_frac": "fraction of groups where none succeeded",
    "groups/mixed_frac": "the rest: groups with both outcomes",
    "samples/generated": "completions generated this step",
    "samples/zero_variance": "of which in zero-variance groups (no gradient)",
    "samples/generated_total": "completions generated in the whole run",
    "samples/zero_variance_total": "of which in zero-variance groups",
    "samples/wasted_frac_total": (
        "their ratio: the run's share of generation spent on groups with no signal"
    ),
    "curriculum/prescreened_frac": (
        "pooled curriculum (`curriculum.pool_by` ≠ none): fraction of the dataset whose predicted"
        " P(group mixed) is below `curriculum.prescreen_threshold` (skipped unless drawn to "
        "explore)"
    ),
    "curriculum/predicted_mixed": (
        "mean predicted P(group mixed) of the prompts drawn this step (its last round)"
    ),
    "completion_len/mean": "mean completion length in tokens",
    "completion_len/max": "the longest completion",
    "reasoning/len_hard": (
        "mean completion length (tokens) of the step's rows whose prompt's estimated success rate"
        " (posterior mean before the step; pooled with `curriculum.pool_by`) is below 1/3; left "
        "out when none"
    ),
    "reasoning/len_medium": "the same for estimated success rates in [1/3, 2/3]",
    "reasoning/len_easy": (
        "the same above 2/3 (longer on hard than on easy prompts: effort follows difficulty)"
    ),
    "reasoning/think_frac": "fraction of completions with a `<think>` block",
    "reasoning/think_chars": (
        "mean characters inside the `<think>` block, over the completions that have one (left out"
        " when none)"
    ),
    "reasoning/self_correction_rate": (
        "fraction of completions containing a phrase of `train.self_correction_phrases` "
        "(case-insensitive, whole words)"
    ),
    "truncated_frac": "fraction of completions cut at `rollout.max_new_tokens` (no EOS)",
    "lr": "the learning rate after this step",
    "loss": "the step's loss: clipped surrogate (+ β·KL), see below",
    "kl": "estimated KL(π_θ ‖ π_ref) per token, aggregated as the loss is (only when β > 0)",
    "clip_frac": "fraction of tokens whose ratio was clipped (`clip_frac_low + clip_frac_high`)",
    "clip_frac_low": "tokens with A < 0 and ratio < 1 − clip_low",
    "clip_frac_high": "tokens with A > 0 and ratio > 1 + clip_high",
    "ratio_min": "smallest π_θ/π_old token ratio in the update (1 with μ = 1)",
    "ratio_max": "largest one",
    "entropy": "mean per-token entropy of the policy on the sampled completions",
    "sampler_logp_gap": "mean absolute gap between the sampler's and the trainer's token log-probs",
    "sampler/kl_k3": (
        "with `algorithm.sampler_correction` on: k3 estimate of KL(π_sampler ‖ π_old) per token, "
        "r − 1 − log r with r = π_old/π_sampler; 0 when sampler and trainer agree"
    ),
    "sampler/is_ratio_mean": (
        "the ratio the correction acts on, before truncation or masking: per token r_t (tis, mis)"
        " or per sequence R_i (seq_mis) or g_i (geo_mask), averaged over tokens"
    ),
    "sampler/is_ratio_min": "its smallest value",
    "sampler/is_ratio_max": 'its largest value (the "explosions" TIS caps)',
    "sampler/is_weight_mean": (
        "the weight the loss used, after truncation or masking, averaged over tokens"
    ),
    "sampler/is_weight_min": "its smallest value (0 when a token was masked)",
    "sampler/is_weight_max": "its largest value (≤ `algorithm.sampler_is_cap` with tis)",
    "sampler/masked_frac": (
        "fraction of tokens whose weight is 0 (masked out by mis, seq_mis or geo_mask)"
    ),
    "sampler/capped_frac": "tis only: fraction of tokens whose ratio exceeded the cap",
    "reward/overlong_penalty": (
        "with `algorithm.overlong_buffer` > 0: mean DAPO overlong penalty (≤ 0), already part of "
        "`reward/mean` and the advantages (not of `reward/total/*`)"
    ),
    "truncated_masked": (
        "with `algorithm.mask_truncated_completions`: completions cut at `rollout.max_new_tokens`"
        " left out of the loss, in groups that trained"
    ),
    "grad_norm": "gradient norm before clipping (mean over the μ optimizer steps)",
    "value_loss": 'PPO only (`algorithm.estimator = "ppo"`): the critic\'s clipped value loss',
    "value_clip_frac": "PPO only: fraction of tokens whose value prediction was clipped",
    "value_mean": "PPO only: mean predicted value over completion tokens",
    "return_mean": "PPO only: mean GAE return (the critic's target)",
    "critic_grad_norm": "PPO only: the critic's gradient norm before clipping",
    "explained_variance": "PPO only: 1 − Var(return − value) / Var(return); near 1 = a good critic",
    "agent/turns/mean": "with `[agent]`: assistant turns per trajectory",
    "agent/tool_calls/mean": "tool calls per trajectory (broken ones included)",
    "agent/tool_call_frac": (
        "share of trajectories that made at least one tool call (the tool-call rate)"
    ),
    "agent/<kind>/errors": (
        "bad tool calls of one kind this step, each answered with an error text: "
        "`malformed_json`, `bad_arguments` (not a JSON object), `unknown_tool`, `wrong_arguments`"
        " (names or types), `raised`, `timeout` (`agent.tool_timeout_s`), `tool_result_type` "
        "(a result neither a str nor a JSON value: bytes, a set, an object), `too_long` (result "
        "cut at `agent.max_tool_response_tokens`); `environment`: environment calls that raised "
        "or hung"
    ),
    "agent/tool/seconds": "seconds spent in tool calls this step (summed over calls)",
    "agent/env_token_frac": (
        "share of the trajectories' tokens (after the prompt) inserted by tools and the "
        "environment: attended, never scored"
    ),
    "agent/cut_at_max_turns_frac": (
        "share of trajectories still going when `agent.max_turns` turns were sampled"
    ),
    "agent/prefix_breaks": (
        "trajectories this step whose engine sampled a turn on other ids than the trajectory "
        "holds (the prefix property broken: a context re-encoded from text, cut or mixed up): "
        "each ends there and is masked, none of its tokens trains; 0 with the built-in and vLLM "
        "engines"
    ),
    "reward/environment/mean": (
        "with `agent.environment`: the environment's own rewards per trajectory (weight 1 in the "
        "total)"
    ),
    "time/rollout": "seconds generating completions",
    "time/reward": "seconds scoring them",
    "time/compile": (
        "seconds compiling the decode step (`rollout.compile`; in `time/rollout` too; non-zero on"
        " the steps that met a new shape, usually the first)"
    ),
    "time/train": "seconds in the update (reference log-probs, forward/backward, optimizer)",
    "time/step": "seconds for the whole step, evaluation included",
    "async/version_lag_mean": (
        'with `rollout.mode = "async"`: how many versions (optimizer steps) behind the trained '
        "weights this step's groups were sampled, averaged over groups; 0 = on-policy"
    ),
    "async/version_lag_max": (
        "the largest lag of a group this step; never above `rollout.max_staleness`"
    ),
    "async/groups_at_lag/<n>": (
        "groups trained this step that were sampled `<n>` versions behind: the lag histogram "
        "(`grpo report` draws it)"
    ),
    "async/queue_depth": (
        "rounds that had arrived and were waiting for a later step when this step drew its own"
    ),
    "async/in_flight": "requests the workers had not answered yet when this step drew",
    "async/learner_idle_s": (
        "seconds the learner spent waiting for this step's rounds and receiving them (also "
        "`time/rollout` in async mode; `time/reward` is 0 there, the workers score)"
    ),
    "async/worker_idle_s": (
        "seconds the workers waited for requests before the results that arrived this step, "
        "summed over the workers (counted when a result arrives, so one step may show more than "
        "its own length; sums over many steps are exact)"
    ),
    "async/worker_busy_s": (
        "seconds the workers spent producing and scoring the results that arrived this step, "
        "summed over the workers (their rollout time)"
    ),
    "async/sync_s": "seconds spent sending weights to the workers this step",
    "async/sync_bytes": (
        "bytes of weights sent this step (the full state once, then the trainable tensors: the "
        "LoRA adapter alone under LoRA)"
    ),
    "async/samples_per_s": "completions this step divided by its wall-clock seconds",
    "async/stale_waits": (
        '`rollout.stale = "wait"`: times a request was held back until fresher weights were out'
    ),
    "async/stale_dropped": (
        '`rollout.stale = "drop"`: groups that came back more than `max_staleness` versions '
        "behind, dropped and requested again"
    ),
    "async/worker_restarts": (
        "rollout workers restarted after dying or hanging, over the run "
        "(`rollout.max_worker_restarts` bounds it)"
    ),
}
