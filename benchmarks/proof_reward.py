"""Proof reward: 64 Coq proof completions checked in parallel, seconds per proof.

Usage: python benchmarks/proof_reward.py [--completions 64] [--workers N] [--repeats 2]

The completions cycle through the embedded proof set (16 theorems about ``nat``) and four
kinds of answer: the reference proof, the reference proof after a restatement of the
theorem, a wrong proof, and ``Admitted``; so half should score 1. Every completion is one
sandboxed program running ``coqc`` twice (the submission, then the check). The batch is
scored with ``workers`` threads (default: one per core), ``repeats`` times; the best wall
time is reported as seconds per proof, with one serial pass (1 worker) for the speed-up,
and the CPU load of other processes during each (the numbers mean little when that is
not ~0).
"""

from __future__ import annotations

import argparse
import os
import resource
import time

from grpo.rewards import proof_checker, proof_tasks, sandbox_isolation
from grpo.rewards.proof import coq_paths


def completions(count: int) -> tuple[list[str], dict[str, list[str]], list[float]]:
    """(completions, their columns, the expected scores)."""
    rows = proof_tasks()
    texts, theorems, preambles, expected = [], [], [], []
    for index in range(count):
        row = rows[index % len(rows)]
        kind = (index // len(rows)) % 4
        script = [
            row["proof"],
            f"{row['theorem']}\n{row['proof']}",
            "Proof. intros. reflexivity. Qed.",
            "Proof. Admitted.",
        ][kind]
        texts.append(f"```coq\n{script}\n```")
        theorems.append(row["theorem"])
        preambles.append(row["preamble"])
        # A bare "reflexivity" does prove the closed arithmetic facts of the set.
        expected.append(float(kind < 2 or (kind == 2 and "forall" not in row["theorem"])))
    return texts, {"theorem": theorems, "preamble": preambles}, expected


def others_load(run) -> tuple[float, float]:
    """(seconds, cores used by other processes) while ``run()`` ran."""
    own_before = _own_cpu()
    busy_before = _busy_cpu()
    started = time.perf_counter()
    run()
    seconds = time.perf_counter() - started
    others = (_busy_cpu() - busy_before) - (_own_cpu() - own_before)
    return seconds, max(0.0, others) / seconds


def _own_cpu() -> float:
    usage = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    return sum(u.ru_utime + u.ru_stime for u in usage)


def _busy_cpu() -> float:
    with open("/proc/stat") as handle:
        fields = [int(x) for x in handle.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields) - idle) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--completions", type=int, default=64)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    if coq_paths() is None:
        raise SystemExit("coqc is not installed (Debian: apt-get install coq)")
    texts, columns, expected = completions(args.completions)
    prompts = ["p"] * len(texts)
    print(f"isolation: {','.join(sandbox_isolation())}; {len(texts)} completions")

    def score(workers: int) -> None:
        values = proof_checker(prompts, texts, workers=workers, **columns)
        if values != expected:
            wrong = [i for i, (v, e) in enumerate(zip(values, expected, strict=True)) if v != e]
            raise SystemExit(f"unexpected scores at completions {wrong}")

    parallel = [others_load(lambda: score(args.workers)) for _ in range(args.repeats)]
    serial = others_load(lambda: score(1))
    best, load = min(parallel)
    print(f"{args.workers} workers: {best:.2f} s for {len(texts)} proofs, "
          f"{best / len(texts):.3f} s per proof (others' load {load:.2f} cores)")  # fmt: skip
    print(f"1 worker:  {serial[0]:.2f} s, {serial[0] / len(texts):.3f} s per proof "
          f"(others' load {serial[1]:.2f} cores); speed-up {serial[0] / best:.2f}×")  # fmt: skip


if __name__ == "__main__":
    main()
