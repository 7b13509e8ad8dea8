"""Golden run: prove that a change of the code (a refactor) changed no training behaviour.

    python benchmarks/golden_run.py --against a61fbf6            # working tree vs a61fbf6
    python benchmarks/golden_run.py --against HEAD --steps 6 --keep /tmp/golden

One fixed-seed training is run twice on the CPU, one run after the other: once with the code
of the ``--against`` commit (its ``src/``, extracted with ``git archive`` into a temporary
folder) and once with the working tree's ``src/``. Each run is a ``python -m grpo train``
subprocess whose PYTHONPATH starts with that code's ``src`` (checked: ``grpo.__file__`` must
resolve inside it), with one thread (OMP_NUM_THREADS=1) so the kernels are deterministic.

The fixtures are built once, with the commit's code, and shared by both runs: a tiny random
Llama with a character tokenizer and 64 arithmetic prompts with an ``answer`` column. The
config trains with μ = 2 optimizer steps per rollout batch, a KL penalty (β = 0.04), a
clip range narrow enough to clip (1 − 0.05, 1 + 0.08: DAPO's clip-higher), DAPO
dynamic sampling (≤ 3 generation rounds), the adaptive curriculum, two reward functions (the
built-in ``numeric_answer`` and a deterministic leading-digit reward written next to the
config, so that rewards vary within groups), gradient accumulation (16 rows per generation
round in micro-batches of 3), lr 1e-3, a completion table every step, and train.seed 7 (not
0, which would hide a changed seed multiplier such as the curriculum sampler's).

Both runs must give bitwise-equal final weights (every tensor of ``final/*.safetensors``),
identical ``metrics.jsonl`` lines (exact values; keys starting with ``time/`` or ending in
``/seconds`` are timings and ignored), and identical ``completions.jsonl`` and
``prompt_stats.jsonl`` rows. The summary also shows, from the commit's metrics, that dynamic
sampling drew more than one round on some step and that groups were trained.

Exit status: 0 = PASS (equal); 1 = FAIL (something differs, or the new code failed to train:
what differs is listed, tensor by tensor and metric key by key with its steps); 2 = the check
itself could not run (bad commit, the commit's code failed) or was inconclusive (equal, but
the config did not exercise dynamic sampling or training on this seed).

``--code DIR`` replaces the working tree's ``src`` as the new code (e.g. another extraction).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from golden_compare import NewCodeError, SetupError, compare, coverage

REPO = Path(__file__).resolve().parent.parent
RUN_TIMEOUT_S = 1800  # a run takes well under a minute; this only guards against a hang
DISTRIBUTED_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR")

BUILD_FIXTURES = """\
import sys
from pathlib import Path

from grpo.demo.model import build_tiny_llama
from grpo.demo.task import make_splits, write_jsonl
from grpo.demo.tokenizer import build_char_tokenizer

work = Path(sys.argv[1])
tokenizer = build_char_tokenizer(work / "model")
build_tiny_llama(tokenizer, hidden_size=32, layers=2, heads=2, directory=work / "model")
rows, _ = make_splits(64, 0, seed=1)
write_jsonl(rows, work / "train.jsonl")
"""

PROBE = """\
import grpo, torch
print(grpo.__file__)
print(torch.get_num_threads())
"""

REWARD_MODULE = '''\
"""A deterministic reward for the golden run: often equal within a group, often not."""


def leading_digit(prompts, completions, **_):
    """1 when the completion starts with a digit (as an answer would), else 0."""
    return [float(text[:1].isdigit()) for text in completions]
'''


CONFIG = """\
[model]
path = {model}
device = "cpu"
dtype = "float32"

[data]
train_path = {data}

[rollout]
group_size = 4
max_new_tokens = 8

[algorithm]
beta = 0.04
inner_iterations = 2
clip_low = 0.05  # narrow enough that the surrogate clips on both sides
clip_high = 0.08
dynamic_sampling = true
max_generation_rounds = 3

[curriculum]
enabled = true

[optim]
lr = 1e-3

[train]
steps = {steps}
seed = {seed}
prompts_per_step = 4
sequences_per_micro_batch = 3  # 16 rows per round: gradient accumulation over 6 micro-batches
progress = false
tensorboard = false
completions_every = 1

[[rewards]]
function = "grpo.rewards:numeric_answer"

[[rewards]]
function = "golden_rewards:leading_digit"
weight = 0.5
"""


@dataclass
class Side:
    """One of the two versions of the code under comparison."""

    name: str  # "base" (the commit) or "new"
    label: str  # for the summary
    src: Path  # its src directory (goes first on PYTHONPATH)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Train one fixed-seed config with a commit's code and with the working "
        "tree's code; require bitwise-equal weights and identical metrics.",
    )
    parser.add_argument("--against", required=True, help="the commit to compare with")
    parser.add_argument("--steps", type=int, default=5, help="training steps (default 5)")
    parser.add_argument(  # not 0: seed × constant would hide a changed constant
        "--seed", type=int, default=7, help="train.seed (default 7)"
    )
    parser.add_argument(
        "--keep", type=Path, help="work in this (new or empty) folder and keep it: runs, logs"
    )
    parser.add_argument(
        "--code", type=Path, default=REPO / "src", help="the new code's src dir (default: ./src)"
    )
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error("--steps must be ≥ 1")
    return args


def git(*args: str) -> str:
    done = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise SetupError(f"git {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout.strip()


def extract_commit(commit: str, directory: Path) -> Path:
    """``git archive COMMIT src | tar -x -C directory``; returns the extracted src."""
    directory.mkdir(parents=True)
    archive = subprocess.Popen(
        ["git", "-C", str(REPO), "archive", commit, "src"], stdout=subprocess.PIPE
    )
    untar = subprocess.run(["tar", "-x", "-C", str(directory)], stdin=archive.stdout)
    assert archive.stdout is not None
    archive.stdout.close()
    if archive.wait() != 0 or untar.returncode != 0:
        raise SetupError(f"could not extract src/ of {commit} with git archive")
    src = directory / "src"
    if not (src / "grpo" / "__init__.py").is_file():
        raise SetupError(f"{commit} has no src/grpo package")
    return src


def child_env(side: Side, work: Path) -> dict[str, str]:
    """The environment of every subprocess of one side: its code first, one thread."""
    env = {k: v for k, v in os.environ.items() if k not in DISTRIBUTED_ENV}
    env.update(
        PYTHONPATH=os.pathsep.join([str(side.src), str(work)]),  # work: the reward module
        OMP_NUM_THREADS="1",  # torch's intra-op threads: 1, so reductions run in one order
        MKL_NUM_THREADS="1",
        TOKENIZERS_PARALLELISM="false",
        PYTHONHASHSEED="0",
        PYTHONDONTWRITEBYTECODE="1",  # leave no __pycache__ in either code's tree
        CUDA_VISIBLE_DEVICES="",  # the CPU only, whatever the machine has
    )
    return env


def fail_for(side: Side, message: str) -> RuntimeError:
    """A failure of the commit's code stops the check; one of the new code is a FAIL."""
    return SetupError(message) if side.name == "base" else NewCodeError(message)


def run_python(side: Side, work: Path, args: list[str], log: Path) -> float:
    """Run ``python ARGS`` with the side's code in ``work``; its output goes to ``log``.
    Returns the wall time in seconds."""
    started = time.perf_counter()
    with log.open("w") as handle:
        try:
            done = subprocess.run(
                [sys.executable, *args],
                cwd=work,
                env=child_env(side, work),
                stdout=handle,
                stderr=subprocess.STDOUT,
                timeout=RUN_TIMEOUT_S,
            )
            returncode = done.returncode
        except subprocess.TimeoutExpired:
            returncode = None
    seconds = time.perf_counter() - started
    if returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:])
        what = "timed out" if returncode is None else f"exited with {returncode}"
        raise fail_for(side, f"{side.label}: `python {' '.join(args)}` {what}:\n{tail}")
    return seconds


def probe(side: Side, work: Path) -> str:
    """Where the side's subprocesses import grpo from; it must be inside the side's src."""
    log = work / f"probe-{side.name}.log"
    run_python(side, work, ["-c", PROBE], log)
    location, threads = log.read_text().splitlines()[-2:]
    package = Path(location).resolve().parent
    if package != (side.src / "grpo").resolve():
        raise SetupError(
            f"{side.label}: a subprocess imports grpo from {location}, not from {side.src}; "
            f"is {side.src / 'grpo'} a package (with __init__.py), and does nothing outrank "
            "PYTHONPATH?"
        )
    if threads != "1":
        raise SetupError(f"{side.label}: torch uses {threads} threads despite OMP_NUM_THREADS=1")
    return location


def write_config(work: Path, steps: int, seed: int) -> Path:
    """The fixed config, CONFIG with the fixtures' paths (run_dir: on the command line)."""
    config = work / "golden.toml"
    config.write_text(
        CONFIG.format(
            model=json.dumps(str(work / "model")),  # JSON strings are TOML basic strings
            data=json.dumps(str(work / "train.jsonl")),
            steps=steps,
            seed=seed,
        )
    )
    return config


def train(side: Side, work: Path, config: Path) -> tuple[Path, float]:
    run_dir = work / f"run-{side.name}"
    command = ["-m", "grpo", "train", str(config), f"--train.run_dir={run_dir}"]
    seconds = run_python(side, work, command, work / f"train-{side.name}.log")
    return run_dir, seconds


# --- comparison ---------------------------------------------------------------------------


# --- driver -------------------------------------------------------------------------------


def prepare(args: argparse.Namespace, work: Path, scratch: Path) -> tuple[Side, Side, Path]:
    """Extract the commit, check where each side imports grpo from, build the fixtures."""
    sha = git("rev-parse", "--verify", f"{args.against}^{{commit}}")
    code = args.code.resolve()
    base = Side("base", f"commit {sha[:12]}", extract_commit(sha, scratch / "base"))
    if code == (REPO / "src").resolve():
        dirty = git("status", "--porcelain", "--", "src")
        head = git("rev-parse", "--short=12", "HEAD")
        label = f"working tree (HEAD {head}{' + uncommitted changes' if dirty else ''})"
    else:
        label = f"code at {code}"
    new = Side("new", label, code)
    if not (code / "grpo").is_dir():
        raise SetupError(f"--code {code}: no grpo package there")
    print(f"golden run: base = {base.label}, new = {new.label}")
    for side in (base, new):
        print(f"  {side.name:4} imports grpo from {probe(side, work)}")
    run_python(base, work, ["-c", BUILD_FIXTURES, str(work)], work / "fixtures.log")
    (work / "golden_rewards.py").write_text(REWARD_MODULE)
    config = write_config(work, args.steps, args.seed)
    print(
        "fixtures (built once, with the base code): tiny random Llama (hidden 32, 2 layers) "
        "+ char tokenizer; 64 arithmetic prompts with an answer column"
    )
    print(
        f"config {config}: {args.steps} steps, seed {args.seed}; 4 prompts × G=4 = 16 rows "
        "per round in micro-batches of 3; μ = 2; β = 0.04; clip [1 − 0.05, 1 + 0.08]; "
        "dynamic sampling (≤ 3 rounds); curriculum; rewards numeric_answer + leading_digit "
        "(×0.5); lr 1e-3; CPU float32, 1 thread"
    )
    return base, new, config


def golden_run(args: argparse.Namespace, work: Path, scratch: Path) -> int:
    base, new, config = prepare(args, work, scratch)
    run_dirs: dict[str, Path] = {}
    for side in (base, new):  # one after the other: never two trainings at once
        run_dirs[side.name], seconds = train(side, work, config)
        print(f"{side.name} run ({side.label}): {seconds:.1f} s wall")
    lines, enough = coverage(run_dirs["base"])
    print("exercised (base run's metrics):")
    for line in lines:
        print(f"  {line}")
    different = compare(run_dirs["base"], run_dirs["new"])
    if different:
        print(f"FAIL: {new.label} does not reproduce {base.label}: {', '.join(different)} differ")
        return 1
    if not enough:
        print(
            "INCONCLUSIVE: the runs are equal, but the config did not exercise dynamic "
            "sampling (> 1 generation round) and training on this seed; try another --seed"
        )
        return 2
    print(
        f"PASS: {new.label} reproduces {base.label} bitwise over {args.steps} steps "
        "(final weights, metrics, completions, prompt stats)"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # Line by line, so that the report and any error on stderr keep their order in a pipe.
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[attr-defined]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="golden-run-") as scratch:
        work = Path(scratch) / "work"
        if args.keep is not None:
            work = args.keep.resolve()
            if work.exists() and any(work.iterdir()):
                print(f"golden run: --keep {work} must be new or empty", file=sys.stderr)
                return 2
        work.mkdir(parents=True, exist_ok=True)
        try:
            status = golden_run(args, work, Path(scratch))
        except SetupError as error:
            print(f"golden run: cannot check: {error}", file=sys.stderr)
            status = 2
        except NewCodeError as error:
            print(f"FAIL: {error}")
            status = 1
        if args.keep is not None:
            print(f"kept: {work} (run-base/, run-new/, the logs, the config and fixtures)")
        elif status:
            print("(rerun with --keep DIR to keep the run folders and logs)")
        print(f"golden run: {time.perf_counter() - started:.1f} s in all")
        return status


if __name__ == "__main__":
    raise SystemExit(main())
