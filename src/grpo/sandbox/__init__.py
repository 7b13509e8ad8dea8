"""Running untrusted programs (model-written code, proofs) in a sandbox: :func:`run_program`
runs any command, :func:`run_python` a Python file, each under :class:`SandboxLimits` and
the strongest :data:`Isolation` the machine allows (:func:`sandbox_isolation` tells which).

Two sides. The trainer's: :mod:`~grpo.sandbox.run` (start a run, collect its
:class:`SandboxResult`), :mod:`~grpo.sandbox.watch` (deadline, output cap, kill),
:mod:`~grpo.sandbox.limits` and :mod:`~grpo.sandbox.uids`. The launcher's, a separate
``python -I -S`` process that isolates itself and ``exec``s the program:
:mod:`~grpo.sandbox.launcher` with :mod:`~grpo.sandbox.mounts`,
:mod:`~grpo.sandbox.rlimits` and :mod:`~grpo.sandbox.seccomp`, standard library only and
loaded by path, never through this package.
"""

from grpo.sandbox.limits import Isolation, SandboxLimits
from grpo.sandbox.run import (
    SandboxError,
    SandboxResult,
    run_program,
    run_python,
    sandbox_isolation,
)

__all__ = [
    "Isolation",
    "SandboxError",
    "SandboxLimits",
    "SandboxResult",
    "run_program",
    "run_python",
    "sandbox_isolation",
]
