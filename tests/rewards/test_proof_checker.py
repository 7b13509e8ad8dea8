"""The proof reward: Coq proofs checked in the sandbox, then adversarial completions.

Every adversarial completion must score 0 and end within its timeout plus a margin (the
test machine's cores are shared). Needs ``coqc``: ``bash scripts/test.sh`` installs Debian's
``coq`` package when run as root; without it these tests skip.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from grpo.rewards import proof_checker, sandbox_isolation
from grpo.rewards.proof import (
    _hidden_from_proofs,
    check_source,
    coq_paths,
    extract_proof,
    proof_tasks,
    submission_source,
    theorem_name,
)

if sys.platform != "linux":
    pytest.skip("the sandbox is Linux-only", allow_module_level=True)
if coq_paths() is None:
    pytest.skip(
        "coqc is not installed (Debian package coq; scripts/test.sh installs it as root)",
        allow_module_level=True,
    )

TIMEOUT = 4.0
MARGIN = 4.0
STATEMENT = "Theorem add_0_r : forall n : nat, n + 0 = n."
GOOD = "Proof.\n  induction n as [|n IH]; simpl; [reflexivity | rewrite IH; reflexivity].\nQed."
MOUNT_CONFINED = "mountns" in sandbox_isolation()


def coq(script: str) -> str:
    return f"Here is the proof:\n```coq\n{script}\n```\n"


def score(script: str, statement: str = STATEMENT, preamble: str = "") -> tuple[float, float]:
    started = time.monotonic()
    [value] = proof_checker(
        ["p"], [coq(script)], theorem=[statement], preamble=[preamble], timeout_s=TIMEOUT
    )
    return value, time.monotonic() - started


def test_extract_proof_and_theorem_name() -> None:
    text = "```python\nx\n```\n```coq\nfirst\n```\n```coq\nProof. auto. Qed.\n```"
    assert extract_proof(text) == "Proof. auto. Qed.\n"
    assert extract_proof("no block") is None
    assert theorem_name("  Lemma foo' : True.") == "foo'"
    with pytest.raises(ValueError, match=r"one 'Theorem name : type\.' sentence"):
        theorem_name("Definition x := 1.")


def test_the_statement_is_emitted_once_and_the_check_elaborates_it_first() -> None:
    restated = STATEMENT.replace(" : ", "  :\n ") + "\n" + GOOD
    assert submission_source("", STATEMENT, restated) == f"\n{STATEMENT}\n\n{GOOD}\n"
    check = check_source("Require Import Lia.", STATEMENT, "add_0_r")
    assert check.index(STATEMENT) < check.index("Require GrpoSubmission.")
    assert "@GrpoSubmission.add_0_r" in check and "Print Assumptions" in check


def test_a_correct_proof_scores_one_also_when_it_restates_the_theorem() -> None:
    assert score(GOOD)[0] == 1.0
    assert score(f"{STATEMENT}\n{GOOD}")[0] == 1.0
    # A restatement in other words is dropped too: the file states the row's theorem.
    assert score(f"Lemma add_0_r (n : nat) : Nat.add n 0 = n.\n{GOOD}")[0] == 1.0
    assert score("Lemma add_0_r : True.\nProof. exact I. Qed.")[0] == 0.0


def test_reference_proofs_of_part_of_the_embedded_set_are_accepted() -> None:
    rows = proof_tasks()
    assert len(rows) == 16 and len({row["theorem"] for row in rows}) == 16
    chosen = [rows[2], rows[10]]  # plain induction, and one with a preamble (lia)
    values = proof_checker(
        [row["prompt"] for row in chosen],
        [coq(row["proof"]) for row in chosen],
        theorem=[row["theorem"] for row in chosen],
        preamble=[row["preamble"] for row in chosen],
    )
    assert values == [1.0, 1.0]


ADVERSARIAL = {
    "wrong proof": "Proof. reflexivity. Qed.",
    "no proof at all": "",
    "Admitted, after printing the verdict line": (
        "Proof. Print Assumptions plus_n_O. Admitted."  # prints "Closed under ..."
    ),
    "a new Axiom used": (
        f"Abort.\nAxiom cheat : forall P : Prop, P.\n{STATEMENT}\nProof. apply cheat. Qed."
    ),
    "a Parameter used": (
        "Abort.\nParameter cheat : forall n : nat, n + 0 = n.\n"
        f"{STATEMENT}\nProof. exact cheat. Qed."
    ),
    "a redefined statement": "Abort.\nTheorem add_0_r : True.\nProof. exact I. Qed.",
    "the theorem under another name": (
        f"Abort.\nTheorem other : forall n : nat, n + 0 = n.\n{GOOD}"
    ),
    "inside a module": (f"Abort.\nModule M.\n{STATEMENT}\n{GOOD}\nEnd M.\nImport M."),
    "Reset Initial and a new nat": (
        "Abort.\nReset Initial.\nInductive nat := O | S (n : nat).\n"
        'Definition plus (n m : nat) := n.\nNotation "x + y" := (plus x y).\n'
        "Theorem add_0_r : forall n : nat, n + O = n.\nProof. reflexivity. Qed."
    ),
    "Unset Guard Checking and a non-terminating fixpoint": (
        "Abort.\nUnset Guard Checking.\nFixpoint loop (n : nat) : False := loop n.\n"
        f"{STATEMENT}\nProof. destruct (loop 0). Qed."
    ),
    "an admitted helper lemma": (
        "Abort.\nLemma helper : forall n : nat, n + 0 = n. Admitted.\n"
        f"{STATEMENT}\nProof. exact helper. Qed."
    ),
    "an Axiom declared inside the proof": (
        "Proof. Axiom cheat : forall n : nat, n + 0 = n. exact cheat. Qed."
    ),
    "the bypass_check attribute": (
        "Abort.\n#[bypass_check(guard)] Fixpoint loop (n : nat) : False := loop n.\n"
        f"{STATEMENT}\nProof. destruct (loop 0). Qed."
    ),
    "Unset Positivity Checking and a negative inductive": (
        "Abort.\nUnset Positivity Checking.\nInductive Bad := mk : (Bad -> False) -> Bad.\n"
        "Definition f (b : Bad) : False := match b with mk g => g b end.\n"
        f"{STATEMENT}\nProof. destruct (f (mk f)). Qed."
    ),
    "Unset Universe Checking": f"Abort.\nUnset Universe Checking.\n{STATEMENT}\n{GOOD}",
    "Drop": f"Abort.\nDrop.\n{STATEMENT}\n{GOOD}",
    "100 MB of output": 'Proof. do 100000 idtac "' + "x" * 1000 + '". Qed.',
}


@pytest.mark.parametrize("script", ADVERSARIAL.values(), ids=ADVERSARIAL.keys())
def test_adversarial_proof_scores_zero_in_time(script: str) -> None:
    value, seconds = score(script)
    assert value == 0.0
    assert seconds < TIMEOUT + MARGIN


def test_a_tactic_that_loops_is_stopped_at_the_timeout() -> None:
    # A loop in constant memory: only the wall-clock timeout can stop it.
    loop = "let x := eval vm_compute in (Z.iter 2000000000 Z.succ 0%Z) in idtac"
    proof = GOOD.replace("Proof.", f"Proof. {loop}.")  # correct, were it not for the loop
    value, seconds = score(proof, preamble="Require Import ZArith.")
    assert value == 0.0
    assert TIMEOUT <= seconds < TIMEOUT + MARGIN


def test_a_recursive_tactic_is_stopped_by_the_timeout_or_the_memory_limit() -> None:
    # Each call grows Coq's stack (~200 MB/s): a fast machine reaches the address-space
    # limit before the timeout, a slow one the timeout first. Either way: 0, in time.
    value, seconds = score("Ltac loop := idtac; loop.\nProof. loop. Qed.")
    assert value == 0.0
    assert seconds < TIMEOUT + MARGIN


def test_a_theorem_proved_alone_is_accepted_with_a_later_unused_axiom() -> None:
    # What follows a finished proof does not matter unless the proof uses it.
    assert score(f"{GOOD}\nAxiom unused : False.")[0] == 1.0


@pytest.fixture
def outside_proof() -> Iterator[Path]:
    """A directory outside the sandbox, readable by anyone (so only the sandbox's file
    system can keep it out), holding a complete proof of the theorem as source
    (``Helper.v``) and compiled as library ``Evil.Helper``."""
    directory = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="grpo-test-"))
    directory.chmod(0o755)
    (directory / "Helper.v").write_text(f"{STATEMENT}\n{GOOD}\n")
    coqc = coq_paths()[0]  # type: ignore[index]
    subprocess.run(
        [coqc, "-q", "-Q", ".", "Evil", "Helper.v"], cwd=directory, check=True, capture_output=True
    )
    for path in directory.iterdir():
        path.chmod(0o644)
    yield directory
    shutil.rmtree(directory)


def reading_scripts(directory: Path) -> list[str]:
    return [
        f'Abort.\nLoad "{directory / "Helper.v"}".',
        f'Abort.\nAdd LoadPath "{directory}" as Evil.\nRequire Evil.Helper.\n'
        f"{STATEMENT}\nProof. exact Evil.Helper.add_0_r. Qed.",
        f'Abort.\nAdd LoadPath "{directory}" as Evil.\nFrom Evil Require Helper.\n'
        f"{STATEMENT}\nProof. exact Helper.add_0_r. Qed.",
    ]


@pytest.mark.skipif(not MOUNT_CONFINED, reason="needs the sandbox's mount namespace")
def test_cannot_load_or_require_a_proof_from_outside(outside_proof: Path) -> None:
    for script in reading_scripts(outside_proof):
        assert score(script)[0] == 0.0
    # Without a mount namespace the file is read and Load passes: the zero above comes
    # from the confinement. (A Require'd outside library fails anyway: the check's load
    # path has only the submission and the standard library.)
    load = reading_scripts(outside_proof)[0]
    [value] = proof_checker(
        ["p"], [coq(load)], theorem=[STATEMENT], isolation="seccomp", timeout_s=TIMEOUT
    )
    assert value == 1.0


def test_a_proof_sees_only_what_coq_needs_of_the_file_system() -> None:
    hidden = _hidden_from_proofs()
    assert {"/usr", "/etc", "/tmp", "/proc", "/dev"}.isdisjoint(hidden)
    assert {"/root", "/home"} & set(hidden) and "/var" in hidden
    assert not any(Path(path).is_symlink() for path in hidden)  # /bin → usr/bin stays


@pytest.mark.skipif(not MOUNT_CONFINED, reason="needs the sandbox's mount namespace")
def test_cannot_write_files_outside(tmp_path: Path) -> None:
    targets = [tmp_path / "redirected", tmp_path / "extracted"]
    script = (
        f'Redirect "{targets[0]}" Print nat.\n'
        f'Require Extraction.\nExtraction "{targets[1]}" nat.\n{GOOD}'
    )
    score(script)
    assert list(tmp_path.iterdir()) == []
