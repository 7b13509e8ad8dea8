"""grpo: Group Relative Policy Optimization for Hugging Face causal language models.

The algorithm core is pure tensor functions: :func:`group_advantages`,
:func:`leave_one_out_advantages`, :func:`zero_variance_groups`, :func:`policy_loss`,
:func:`aggregate`, :func:`kl_penalty`. :func:`train` runs the whole loop from a
:class:`Config` (see :func:`load_config`).

Shape letters. A tensor's name ends in the letters of its dimensions, and each letter
means one thing everywhere:

    B  rows: one sampled completion each (of a step, a round, a process or a micro-batch)
    N  groups: one prompt each, G rows apiece; row b belongs to group b // G, B = N·G
    G  the group size
    T  completion token positions (right-padded)
    P  prompt token positions (left-padded)
    L  a whole sequence, P + T
    U  new tokens fed on top of a KV cache in one forward (the last sampled id, an insertion)
    V  the vocabulary
    H  the model's hidden size
    F  token positions flattened out of (B, T), the rows of a matrix (chunked LM head)
    C  a chunk of F
    D  dataset prompts (per-prompt statistics)
    W  processes (the world size)
    K  named columns stacked into one tensor (collectives)
    X  any one of P, T or L (helpers that pad either side)
    1  a kept singleton dimension, for broadcasting

So ``advantages_B`` is one advantage per completion, ``advantages_BT`` one per completion
token (PPO's GAE, or GRPO's A_i expanded along T), ``rewards_NG`` a step's rewards by group.

Whose rows. Under torchrun each process generates and trains a contiguous block of the
step's rows (``Dist.rows``). A name with the ``local_`` prefix holds this process's rows
only (``local_keep_B``, ``local_rollout``); a name without it holds the whole step's rows,
identical on every process (``keep_B``, the ``Selection``), and is indexed with
``[dist.rows(B)]`` to become local. Containers say which in their field comments ("this
process's rows"). Mixing the two is the riskiest indexing in the trainer: with one process
they coincide, so only a multi-process test catches a slip.
"""

from grpo.algo.advantages import group_advantages, leave_one_out_advantages
from grpo.algo.groups import zero_variance_groups
from grpo.algo.kl import kl_penalty
from grpo.algo.losses import aggregate, policy_loss
from grpo.config import Config, ConfigError, load_config

__version__ = "0.1.0"

__all__ = [
    "Config",
    "ConfigError",
    "aggregate",
    "group_advantages",
    "kl_penalty",
    "leave_one_out_advantages",
    "load_config",
    "policy_loss",
    "train",
    "zero_variance_groups",
]


def __getattr__(name: str):
    # The trainer pulls in transformers; import it only when asked for.
    if name == "train":
        from grpo.training.loop import train

        return train
    raise AttributeError(f"module 'grpo' has no attribute {name!r}")
