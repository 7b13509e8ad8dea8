"""Golden run: prove that a change of the code (a refactor) changed no training behaviour.

    python benchmarks/golden_run.py --against 3ac6e6b            # working tree vs 3ac6e6b
    python benchmarks/golden_run.py --against HEAD --config agent --steps 3 --keep /tmp/golden

Each fixed-seed config (``--config single``, ``agent`` or ``both``, the default, and
``smollm2``, the real pretrained model from its ``.gguf`` file; they are in
``golden_configs.py``) is trained twice on the CPU, one run after the other: once with
the code of the ``--against`` commit (its ``src/``, extracted with ``git archive`` into a
temporary folder) and once with the working tree's ``src/``. Each run is a ``python -m grpo
train`` subprocess whose PYTHONPATH starts with that code's ``src`` (checked: ``grpo.__file__``
must resolve inside it), with one thread (OMP_NUM_THREADS=1) so the kernels are deterministic.

A config's fixtures are built once, with the commit's code, and shared by both runs.
``single`` (5 steps) is single-turn GRPO with μ = 2, β > 0, a clip range narrow enough to
clip, DAPO dynamic sampling, the curriculum, two rewards and gradient accumulation.
``agent`` (2 steps) is multi-turn through ``[agent]``: an environment that rewards every
turn and a tool, on a tiny model warm-started to write tool calls (whole and botched), so the
tool call executor, environment rewards, ``agent/*`` metrics and the masking of inserted
tokens are covered too. ``golden_configs.py`` describes both in full.

Both use train.seed 7 (not 0, which would hide a changed seed multiplier such as the
curriculum sampler's). For each config both runs must give bitwise-equal final weights (every
tensor of ``final/*.safetensors``), identical ``metrics.jsonl`` lines (exact values; keys
starting with ``time/`` or ending in ``/seconds`` are timings and ignored, and a key the
base run never logged, a metric the change adds, is listed rather than compared), and
identical ``completions.jsonl`` and ``prompt_stats.jsonl`` rows. The summary also shows, from the
commit's metrics, what the config exercised: for ``single`` that dynamic sampling drew more
than one round on some step and that groups were trained; for ``agent`` that rows ran more
than one turn, tools were called, tokens were inserted, the environment rewarded and agent/*
metrics were logged, and that groups were trained.

Exit status: 0 = PASS (every config chosen is equal); 1 = FAIL (a config differs, or the new
code failed to train it: what differs is listed, tensor by tensor and metric key by key with
its steps); 2 = no FAIL, but the check itself could not run (bad commit, the commit's code
failed) or was inconclusive (equal, but a config did not exercise what it is for on this
seed) for some config.

``--new-set KEY=VALUE`` (repeatable) adds a config override to the new code's runs only:
``--new-set rollout.mode=async --new-set rollout.max_staleness=0`` checks that asynchronous
rollouts at staleness 0 reproduce the synchronous loop (``async/*`` metrics, which only an
asynchronous run logs, are ignored like timings). ``--steps N`` trains every config chosen
N steps. ``--code DIR`` replaces the working tree's
``src`` as the new code (e.g. another extraction). ``--keep DIR`` keeps the work folder: one
subfolder per config with its fixtures, config, runs and logs.
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

from golden_compare import NewCodeError, SetupError, compare, read_jsonl
from golden_configs import CONFIGS, GoldenConfig

REPO = Path(__file__).resolve().parent.parent
RUN_TIMEOUT_S = 1800  # a run takes well under a minute; this only guards against a hang
DISTRIBUTED_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR")
PASS, FAIL, NOT_CHECKED = 0, 1, 2  # the exit statuses

PROBE = """\
import grpo, torch
print(grpo.__file__)
print(torch.get_num_threads())
"""


@dataclass
class Side:
    """One of the two versions of the code under comparison."""

    name: str  # "base" (the commit) or "new"
    label: str  # for the summary
    src: Path  # its src directory (goes first on PYTHONPATH)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Train fixed-seed configs with a commit's code and with the working "
        "tree's code; require bitwise-equal weights and identical metrics.",
    )
    parser.add_argument("--against", required=True, help="the commit to compare with")
    parser.add_argument(
        "--config", choices=[*CONFIGS, "both"], default="both", help="which (default: both)"
    )
    parser.add_argument("--steps", type=int, help="training steps (default: single 5, agent 2)")
    parser.add_argument(  # not 0: seed × constant would hide a changed constant
        "--seed", type=int, default=7, help="train.seed (default 7)"
    )
    parser.add_argument(
        "--keep", type=Path, help="work in this (new or empty) folder and keep it: runs, logs"
    )
    parser.add_argument(
        "--code", type=Path, default=REPO / "src", help="the new code's src dir (default: ./src)"
    )
    parser.add_argument(
        "--new-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a config override for the new code's runs only, e.g. rollout.mode=async "
        "(repeatable): the new code must reproduce the base with it",
    )
    args = parser.parse_args(argv)
    if args.steps is not None and args.steps < 1:
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
        PYTHONPATH=os.pathsep.join([str(side.src), str(work)]),  # work: the config's modules
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


def write_config(golden: GoldenConfig, work: Path, steps: int, seed: int) -> Path:
    """The config's modules and its TOML with the fixtures' paths (run_dir: on the command
    line)."""
    for name, text in golden.modules.items():
        (work / name).write_text(text)
    config = work / f"golden-{golden.name}.toml"
    config.write_text(
        golden.toml.format(
            model=json.dumps(str(work / "model")),  # JSON strings are TOML basic strings
            gguf=json.dumps(str(work / "model.gguf")),
            data=json.dumps(str(work / "train.jsonl")),
            steps=steps,
            seed=seed,
        )
    )
    return config


def train(side: Side, work: Path, config: Path, overrides: list[str]) -> tuple[Path, float]:
    run_dir = work / f"run-{side.name}"
    command = ["-m", "grpo", "train", str(config), f"--train.run_dir={run_dir}"]
    command += [f"--{override}" for override in overrides]
    seconds = run_python(side, work, command, work / f"train-{side.name}.log")
    return run_dir, seconds


def prepare(args: argparse.Namespace, work: Path, scratch: Path) -> tuple[Side, Side]:
    """Extract the commit; check where each side imports grpo from."""
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
    if args.new_set:
        print(f"  the new code's runs also set: {', '.join(args.new_set)}")
    for side in (base, new):
        print(f"  {side.name:4} imports grpo from {probe(side, work)}")
    return base, new


def check_config(
    golden: GoldenConfig,
    sides: tuple[Side, Side],
    work: Path,
    steps: int,
    seed: int,
    new_overrides: list[str],
) -> tuple[int, str]:
    """Train ``golden`` with both codes in ``work`` and compare: (exit status, verdict)."""
    base = sides[0]
    print(f"\n=== config {golden.name} ===")
    run_python(base, work, ["-c", golden.fixtures, str(work)], work / "fixtures.log")
    print(f"fixtures (built once, with the base code): {golden.fixtures_said}")
    config = write_config(golden, work, steps, seed)
    print(f"config {config}: {steps} steps, seed {seed}; {golden.said}; CPU float32, 1 thread")
    run_dirs: dict[str, Path] = {}
    for side in sides:  # one after the other: never two trainings at once
        overrides = new_overrides if side.name == "new" else []
        run_dirs[side.name], seconds = train(side, work, config, overrides)
        print(f"{side.name} run ({side.label}): {seconds:.1f} s wall")
    lines, enough = golden.coverage(read_jsonl(run_dirs["base"] / "metrics.jsonl") or [])
    print("exercised (base run's metrics):")
    for line in lines:
        print(f"  {line}")
    different = compare(run_dirs["base"], run_dirs["new"])
    if different:
        return FAIL, f"FAIL: does not reproduce the base: {', '.join(different)} differ"
    if not enough:
        return NOT_CHECKED, (
            "INCONCLUSIVE: the runs are equal, but the config did not exercise what it is for "
            "(see `exercised` above) on this seed; try another --seed"
        )
    return PASS, (
        f"PASS: reproduces the base bitwise over {steps} steps (final weights, metrics, "
        "completions, prompt stats)"
    )


def golden_run(args: argparse.Namespace, work: Path, scratch: Path) -> int:
    sides = prepare(args, work, scratch)
    chosen = ["single", "agent"] if args.config == "both" else [args.config]
    verdicts: dict[str, tuple[int, str]] = {}
    for name in chosen:
        golden, directory = CONFIGS[name], work / name
        directory.mkdir()
        try:
            steps = args.steps or golden.steps
            verdicts[name] = check_config(golden, sides, directory, steps, args.seed, args.new_set)
        except SetupError as error:
            verdicts[name] = NOT_CHECKED, f"cannot check: {error}"
        except NewCodeError as error:
            verdicts[name] = FAIL, f"FAIL: {error}"
        print(f"{name}: {verdicts[name][1]}")
    print(f"\nsummary ({sides[1].label} against {sides[0].label}):")
    for name, (_, verdict) in verdicts.items():
        print(f"  {name + ':':7} {verdict.splitlines()[0]}")
    statuses = {status for status, _ in verdicts.values()}
    return FAIL if FAIL in statuses else NOT_CHECKED if NOT_CHECKED in statuses else PASS


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
                return NOT_CHECKED
        work.mkdir(parents=True, exist_ok=True)
        try:
            status = golden_run(args, work, Path(scratch))
        except SetupError as error:
            print(f"golden run: cannot check: {error}", file=sys.stderr)
            status = NOT_CHECKED
        except NewCodeError as error:  # the new code's probe failed
            print(f"FAIL: {error}")
            status = FAIL
        if args.keep is not None:
            print(f"kept: {work} (per config: run-base/, run-new/, the logs, config, fixtures)")
        elif status:
            print("(rerun with --keep DIR to keep the run folders and logs)")
        print(f"golden run: {time.perf_counter() - started:.1f} s in all")
        return status


if __name__ == "__main__":
    raise SystemExit(main())
