"""Proof reward: the completion's Coq proof of the row's theorem, checked by ``coqc``.

The row holds the theorem statement in a column (``theorem`` unless ``theorem_column``
says otherwise), one Coq sentence such as ``Theorem add_0_r : forall n : nat, n + 0 =
n.``, and optionally a preamble (``preamble``: ``Require Import Lia.`` ...). The
completion's proof is its last fenced block tagged ``coq`` (or ``rocq``, else the last
untagged block): the proof script, ``Proof. ... Qed.``; a block that starts by restating
the theorem (``Theorem``/``Lemma``... with its name) has that sentence dropped, whatever
it says: the file states the row's theorem.

The reward is 1.0 when the proof proves *that* statement with nothing assumed, else 0.0.
Two runs of ``coqc``, one after the other in a single sandboxed program (the code
reward's :class:`~grpo.sandbox.SandboxLimits`: time, memory, output, no network,
a private file system):

Besides the code reward's hidden directories, a proof's mount namespace hides every
top-level directory but ``/usr`` (Coq), ``/etc`` (findlib's configuration) and the
sandbox's own ``/proc``, ``/dev`` and ``/tmp``: ``Load``, ``Add LoadPath``, ``Redirect``
and ``Extraction`` reach nothing of the machine's data.

1. **The submission**, ``GrpoSubmission.v``: the preamble, the statement exactly as given,
   then the completion's block. Whatever the block does after the statement (``Qed.``
   then new commands, ``Abort``, ``Reset``, modules, ``Set``/``Unset`` of options,
   notations, ``Drop``, ``Load``, ``Redirect``) stays in this file. Its output is the
   sandbox's stdout and stderr, capped like any program's.
2. **The check**, ``GrpoCheck.v``, written by the reward and compiled in a fresh
   directory holding only it and the submission's ``.vo``: the preamble, the statement
   again (elaborated *before* the submission is loaded, so nothing in it can change what
   the statement means), then ``Require GrpoSubmission`` and a definition whose declared
   type is that statement and whose body is ``@GrpoSubmission.<name>``; the kernel
   checks the two agree (a proof of another statement, or of one about redefined
   ``nat``, fails), and ``Print Assumptions`` must report "Closed under the global
   context": no ``Admitted``, ``Axiom``, ``Parameter``, nor anything checked with the
   guard, positivity or universe checks off (``Unset Guard Checking``,
   ``#[bypass_check]``) anywhere in what the proof uses. Only this run writes the control pipe the
   verdict is read from; the submission's run has it closed.

Not guarded: a bug in Coq itself (the check trusts the ``.vo`` that ``coqc`` wrote from
the submission). Needs ``coqc`` (Debian's ``coq`` package); without it every call raises
:class:`ProofCheckerUnavailable`.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from importlib import resources
from typing import Any

from grpo.rewards.sandboxed import parse_rows, score_sandboxed
from grpo.sandbox import Isolation, SandboxLimits, run_program
from grpo.text.fences import last_fenced_block

_COQ_TAGS = {"coq", "rocq", "v"}
_KEYWORD = r"\s*(?:Theorem|Lemma|Fact|Remark|Corollary|Proposition|Example)\s+"
_THEOREM = re.compile(_KEYWORD + r"([A-Za-z_][\w']*)")
_SENTENCE_END = re.compile(r"\.(?=\s|$)")  # "Nat.add" has a period, not a sentence end
_CLOSED = b"Closed under the global context"
SUBMISSION, CHECK = "GrpoSubmission", "GrpoCheck"

# $1: the check's source, $2: coqc. The submission's run has no fd 3 (the verdict's pipe);
# the check runs in a new directory, so no file the submission wrote is on its load path.
_SCRIPT = f"""\
"$2" -q -native-compiler no {SUBMISSION}.v 3>&- </dev/null || exit 1
mkdir check && mv {SUBMISSION}.vo check/ && cd check || exit 2
printf '%s' "$1" > {CHECK}.v || exit 2
exec "$2" -q -native-compiler no {CHECK}.v >&3 2>&1 3>&- </dev/null
"""


class ProofCheckerUnavailable(RuntimeError):
    """``coqc`` is not installed (Debian: ``apt-get install coq``)."""


@functools.cache
def coq_paths() -> tuple[str, tuple[str, ...]] | None:
    """``coqc``'s absolute path and the directories it reads (its installation and its
    standard library), or None when it is not installed."""
    coqc = shutil.which("coqc")
    if coqc is None:
        return None
    try:
        library = subprocess.run(
            [coqc, "-where"], capture_output=True, text=True, timeout=30, check=True
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    directories = {os.path.dirname(os.path.realpath(coqc)), library}
    return os.path.abspath(coqc), tuple(sorted(d for d in directories if d))


# What coqc and sh need of the root file system (the rest is hidden from a proof): its
# installation, its findlib configuration in /etc, and the sandbox's own /proc, /dev, /tmp.
_KEPT_FOR_COQ = {"usr", "etc", "proc", "dev", "tmp"}


def _hidden_from_proofs() -> list[str]:
    """Every top-level directory but those coqc needs (symbolic links such as /bin →
    usr/bin are left alone: hiding one would hide its target)."""
    hidden = []
    for entry in os.scandir("/"):
        if entry.name not in _KEPT_FOR_COQ and entry.is_dir(follow_symlinks=False):
            hidden.append(entry.path)
    return sorted(hidden)


def extract_proof(completion: str) -> str | None:
    """The last ```coq fenced block (``rocq``/``v`` too), else the last untagged one."""
    return last_fenced_block(completion, _COQ_TAGS)


def theorem_name(statement: str) -> str:
    """The name a statement declares; ValueError unless it is one ``Theorem``/``Lemma``/...
    sentence ending in a period."""
    match = _THEOREM.match(statement)
    if match is None or not statement.rstrip().endswith("."):
        raise ValueError(
            f"a theorem statement must be one 'Theorem name : type.' sentence: {statement[:200]!r}"
        )
    return match.group(1)


def _without_restatement(proof: str, name: str) -> str:
    """The proof script without a leading restatement of the theorem (``Theorem``,
    ``Lemma``... with its name, up to the sentence's final period). Dropping it is safe
    whatever it said: the statement the file holds is the row's."""
    match = re.match(_KEYWORD + re.escape(name) + r"(?![\w'])", proof)
    if match is None:
        return proof
    end = _SENTENCE_END.search(proof, match.end())
    return proof if end is None else proof[end.end() :]


def submission_source(preamble: str, statement: str, proof: str) -> str:
    """``GrpoSubmission.v``: preamble, the statement as given, the completion's script."""
    script = _without_restatement(proof, theorem_name(statement))
    return f"{preamble}\n{statement}\n{script}\n"


def check_source(preamble: str, statement: str, name: str) -> str:
    """``GrpoCheck.v``: the statement's type, elaborated before the submission is loaded,
    must be the type of the submission's theorem, which must assume nothing."""
    check = "grpo_reward_check" + ("_" if name == "grpo_reward_check" else "")
    return (
        f"{preamble}\n{statement}\nAdmitted.\nRequire {SUBMISSION}.\n"
        f"Definition {check} : ltac:(let T := type of {name} in exact T)\n"
        f"  := @{SUBMISSION}.{name}.\n"
        f"Print Assumptions {check}.\n"
    )


def check_proof(
    preamble: str,
    statement: str,
    proof: str,
    limits: SandboxLimits,
    *,
    isolation: Isolation = "auto",
    require: Sequence[str] = (),
) -> bool:
    """Whether ``proof`` proves ``statement`` (after ``preamble``) with nothing assumed."""
    paths = coq_paths()
    if paths is None:
        raise ProofCheckerUnavailable("proof_checker needs coqc (Debian: apt-get install coq)")
    coqc, expose = paths
    name = theorem_name(statement)
    result = run_program(
        {f"{SUBMISSION}.v": submission_source(preamble, statement, proof)},
        ["/bin/sh", "-c", _SCRIPT, "sh", check_source(preamble, statement, name), coqc],
        limits=limits,
        isolation=isolation,
        require=require,
        pass_control=True,
        expose=expose,
        hide=_hidden_from_proofs(),
    )
    return result.ok and _CLOSED in result.control


def proof_checker(
    prompts: list[str],
    completions: list[str],
    *,
    theorem_column: str = "theorem",
    preamble_column: str = "preamble",
    timeout_s: float = 20.0,
    memory_mb: int = 2048,
    max_processes: int = 32,
    output_bytes: int = 1 << 20,
    workers: int = 0,
    isolation: Isolation = "auto",
    require: Sequence[str] = (),
    **columns: Any,
) -> list[float]:
    """1.0 when ``coqc`` accepts the completion's proof of the row's theorem, exactly as
    stated, with no axiom, admitted lemma or parameter behind it; else 0.0.

    ``timeout_s``, ``memory_mb``, ``max_processes`` and ``output_bytes`` bound each
    completion's check (see :class:`~grpo.sandbox.SandboxLimits`); ``workers`` 0 =
    one per core; ``require`` names sandbox layers without which nothing runs.
    """
    if theorem_column not in columns:
        raise ValueError(f"proof_checker needs a {theorem_column!r} column; got {sorted(columns)}")
    statements = [str(value) for value in columns[theorem_column]]
    preambles = [str(value or "") for value in columns.get(preamble_column, [""] * len(prompts))]
    parse_rows(statements, theorem_name, theorem_column)  # each states one theorem
    limits = SandboxLimits(
        timeout_s=timeout_s,
        memory_mb=memory_mb,
        max_processes=max_processes,
        output_bytes=output_bytes,
    )

    def check(row: int, proof: str) -> float:
        accepted = check_proof(
            preambles[row], statements[row], proof, limits, isolation=isolation, require=require
        )
        return float(accepted)

    return score_sandboxed(completions, extract_proof, check, workers)


proof_checker.is_accuracy = True  # type: ignore[attr-defined]  # 1.0 = the proof is accepted


def proof_tasks() -> list[dict[str, str]]:
    """The embedded proof set: our own small theorems about ``nat`` (addition mostly), each
    row with ``prompt``, ``theorem``, ``preamble`` and a reference ``proof``."""
    text = resources.files("grpo.rewards").joinpath("proof_tasks.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]
