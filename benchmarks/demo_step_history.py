"""The demo's GRPO step time at several commits of the project's history.

    grpo demo --quick --work-dir demo-run        # once: base/, train.jsonl, dev.jsonl, grpo.toml
    .venv/bin/python benchmarks/demo_step_history.py --work-dir demo-run \\
        [--commits 46b2a9b c89d6db HEAD] [--steps 100] [--threads 1] [--repeats 3] [--json out.json]

Every commit trains the same warm-started model (``WORK_DIR/base``) on the same demo config
(``WORK_DIR/grpo.toml``) for ``--steps`` steps, held-out evaluation off (``eval.path`` dropped,
``eval.every=0``: not even before and after training), in its own run dir.
Each commit is checked out with ``git worktree add --detach`` into a temporary folder and run
in a subprocess of this interpreter with ``PYTHONPATH=<worktree>/src`` and
``OMP_NUM_THREADS=<threads>``, through the ``grpo`` console entry that commit's pyproject
names (``grpo.cli``, ``grpo.tools.cli`` or ``grpo.cli.main``). ``--train.threads`` is passed
where the commit's config has it; config keys that commit does not know are dropped from its
copy of the TOML and reported.

Per commit it reports the median ``time/step`` (and ``time/rollout``, ``time/reward``,
``time/train``) of the run's ``metrics.jsonl`` over the steps after the first ``--warmup``
(10), and the run's whole wall time (start-up included) divided by the steps. Commits run one
after the other, never in parallel; with ``--repeats R`` the whole list is run R times in turn
and the per-run figures' median is reported, so machine noise hits every commit alike.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TIMES = ("time/step", "time/rollout", "time/reward", "time/train")
DEFAULT_COMMITS = (
    "46b2a9b",  # 2026-12-02: the demo measured at 1500 GRPO steps in 192 s (~0.13 s a step)
    "f307122",  # 2026-12-02: reliability, learning signal, memory, chunked log-probs, logging
    "3a2fc82",  # 2026-12-03: architecture: sub-packages by layer, the step as typed stages
    "2cfe732",  # 2026-12-03: train.threads (097e8bb), progress as plain lines off a terminal
    "010c891",  # 2026-12-03: reasoning metrics computed every step
    "4d61d5b",  # 2026-12-03: shared prompt per group, fused AdamW
    "64eb763",  # 2026-12-04: thread rule; the code of the 302 s / 375 s measurement (8110b8a)
    "c89d6db",  # 2026-12-04: decode loop rewritten (in place, ended rows leave the batch)
    "3c3d648",  # 2026-12-04: one metric table, typed producers, the update's statistics returned
    "HEAD",
)
PROBE = """
import dataclasses, json, typing, grpo, grpo.config as c
config = c.Config()
keys = {}
for f in dataclasses.fields(config):
    value = getattr(config, f.name)
    if dataclasses.is_dataclass(value):
        keys[f.name] = [g.name for g in dataclasses.fields(value)]
    else:
        try:
            (item,) = typing.get_args(typing.get_type_hints(c.Config)[f.name])
            keys[f.name] = [g.name for g in dataclasses.fields(item)]
        except Exception:
            keys[f.name] = None
print(json.dumps({"file": grpo.__file__, "keys": keys}))
"""


def git(*args: str) -> str:
    """Run git in the repository; its stdout, stripped."""
    done = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()


def commit_info(commit: str) -> dict[str, str]:
    """Full id, short id, author date and subject of ``commit``."""
    sha, short, date, subject = git(
        "log", "-1", "--format=%H%n%h%n%ad%n%s", "--date=short", commit
    ).split("\n", 3)
    return {"commit": short, "sha": sha, "date": date, "subject": subject}


def entry_module(worktree: Path) -> tuple[str, str]:
    """The (module, function) of the ``grpo`` console script in the commit's pyproject."""
    project = tomllib.loads((worktree / "pyproject.toml").read_text())["project"]
    module, _, function = project["scripts"]["grpo"].partition(":")
    return module, function or "main"


def child_env(worktree: Path, threads: int) -> dict[str, str]:
    """The environment of a commit's subprocess: its sources first, the thread count fixed."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(worktree / "src")
    env["OMP_NUM_THREADS"] = str(threads)
    env.pop("PYTHONSTARTUP", None)
    return env


def config_keys(worktree: Path, env: dict[str, str]) -> dict[str, list[str] | None]:
    """The commit's config sections and their keys (None: a section whose keys are unknown)."""
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"config probe failed: {last_lines(done.stderr)}")
    probe = json.loads(done.stdout.strip().splitlines()[-1])
    if not Path(probe["file"]).resolve().is_relative_to(worktree.resolve()):
        raise RuntimeError(f"grpo imported from {probe['file']}, not the worktree")
    return probe["keys"]


def filter_config(
    config: dict[str, Any], keys: dict[str, list[str] | None]
) -> tuple[dict[str, Any], list[str]]:
    """``config`` without the sections and keys this commit does not know; the dropped names."""
    kept: dict[str, Any] = {}
    dropped: list[str] = []
    for section, body in config.items():
        if section not in keys:
            dropped.append(section)
            continue
        known = keys[section]
        tables = body if isinstance(body, list) else [body]
        if known is not None:
            dropped += sorted({f"{section}.{k}" for t in tables for k in t if k not in known})
            tables = [{k: v for k, v in t.items() if k in known} for t in tables]
        kept[section] = tables if isinstance(body, list) else tables[0]
    return kept, dropped


def toml_value(value: Any) -> str:
    """One TOML value: strings as JSON strings (valid TOML basic strings)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"no TOML for {value!r}")


def dump_toml(config: dict[str, Any]) -> str:
    """The config's tables as TOML (``[section]`` or ``[[section]]`` for lists of tables)."""
    lines: list[str] = []
    for section, body in config.items():
        for table in body if isinstance(body, list) else [body]:
            lines.append(f"[[{section}]]" if isinstance(body, list) else f"[{section}]")
            lines += [f"{json.dumps(k)} = {toml_value(v)}" for k, v in table.items()]
            lines.append("")
    return "\n".join(lines)


def last_lines(text: str, count: int = 3) -> str:
    """The last non-empty lines of a log, joined: the reason a run failed."""
    lines = [line.strip() for line in text.replace("\r", "\n").splitlines() if line.strip()]
    return " | ".join(lines[-count:]) or "no output"


def read_times(run_dir: Path, warmup: int) -> dict[str, float | None]:
    """Median of each of TIMES over the logged steps after the first ``warmup``."""
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        found = sorted(run_dir.rglob("metrics.jsonl"))
        if not found:
            raise RuntimeError(f"no metrics.jsonl under {run_dir}")
        path = found[0]
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rows = [row for row in rows if "time/step" in row]
    if not rows:
        raise RuntimeError(f"no time/step in {path}")
    timed = [row for row in rows if row.get("step", 0) > warmup] or rows
    medians: dict[str, float | None] = {"timed_steps": float(len(timed))}
    for key in TIMES:
        values = [float(row[key]) for row in timed if key in row]
        medians[key] = statistics.median(values) if values else None
    return medians


def train_once(worktree: Path, scratch: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Train the demo config at the worktree's commit; its timings (raises on failure)."""
    env = child_env(worktree, args.threads)
    keys = config_keys(worktree, env)
    demo_config = tomllib.loads((args.work_dir / "grpo.toml").read_text())
    demo_config.get("eval", {}).pop("path", None)  # no held-out set: no evaluation at all
    config, dropped = filter_config(demo_config, keys)
    config_path = scratch / "grpo.toml"
    config_path.write_text(dump_toml(config))
    run_dir = scratch / "run"
    overrides = [f"--train.steps={args.steps}", f"--train.run_dir={run_dir}", "--eval.every=0"]
    if "threads" in (keys.get("train") or []):
        overrides.append(f"--train.threads={args.threads}")
    overrides += [o for o in args.override if known_override(o, keys)]
    module, function = entry_module(worktree)
    code = f"import sys; from {module} import {function}; sys.exit({function}())"
    command = [sys.executable, "-c", code, "train", str(config_path), *overrides]
    started = time.perf_counter()
    with (scratch / "train.log").open("w") as log:
        output = {"stdout": log, "stderr": subprocess.STDOUT, "stdin": subprocess.DEVNULL}
        done = subprocess.run(command, env=env, cwd=scratch, timeout=args.timeout, **output)
    wall = time.perf_counter() - started
    if done.returncode:
        output = (scratch / "train.log").read_text(errors="replace")
        raise RuntimeError(f"exit {done.returncode}: {last_lines(output)}")
    times = read_times(run_dir, args.warmup)
    extra = {"wall": wall, "entry": module, "dropped": dropped, "overrides": overrides}
    return {**times, "wall_per_step": wall / args.steps, **extra}


def known_override(override: str, keys: dict[str, list[str] | None]) -> bool:
    """Whether ``--section.key=value`` names a key of this commit's config."""
    section, _, key = override.removeprefix("--").partition("=")[0].partition(".")
    known = keys.get(section, [])
    return known is None or key in known


def run_commit(commit: str, args: argparse.Namespace) -> dict[str, Any]:
    """One timed run of ``commit`` in a worktree of its own; ``error`` set when it failed."""
    with tempfile.TemporaryDirectory(prefix="demo_step_") as folder:
        worktree = Path(folder) / "tree"
        scratch = Path(folder) / "scratch"
        scratch.mkdir()
        git("worktree", "add", "--detach", str(worktree), commit)
        try:
            return train_once(worktree, scratch, args)
        except (RuntimeError, KeyError, ValueError, OSError, subprocess.TimeoutExpired) as error:
            return {"error": str(error)[:400]}
        finally:
            git("worktree", "remove", "--force", str(worktree))


def combine(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median over repeats of each figure; the first error when no run worked."""
    good = [run for run in runs if "error" not in run]
    if not good:
        return {"error": runs[0]["error"]}
    out: dict[str, Any] = {"runs": len(good), "failed_runs": len(runs) - len(good)}
    for key in (*TIMES, "wall_per_step"):
        values = [run[key] for run in good if run.get(key) is not None]
        out[key] = statistics.median(values) if values else None
    out["per_repeat_step"] = [run["time/step"] for run in good]
    out.update({k: good[0][k] for k in ("entry", "dropped", "overrides", "timed_steps")})
    return out


def cell(value: float | None) -> str:
    return "–" if value is None else f"{value:.4f}"


def table(results: list[dict[str, Any]]) -> str:
    """The markdown table of the results, in the order given."""
    lines = [
        "| commit | date | subject | step s | rollout s | reward s | train s | wall/step s |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        subject = r["subject"] if len(r["subject"]) <= 60 else r["subject"][:57] + "..."
        start = f"| {r['commit']} | {r['date']} | {subject.replace('|', '/')} |"
        if "error" in r:
            reason = r["error"].replace("|", "/")
            lines.append(f"{start} could not run: {reason} | | | | |")
            continue
        figures = [r[key] for key in (*TIMES, "wall_per_step")]
        lines.append(f"{start} {' | '.join(cell(v) for v in figures)} |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--commits", nargs="+", default=list(DEFAULT_COMMITS))
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--work-dir", type=Path, default=REPO / "runs" / "demo")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=10, help="first steps left out")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per run")
    note = "an extra --section.key=value, passed to the commits whose config has the key"
    parser.add_argument("--override", action="append", default=[], help=note)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    args.work_dir = args.work_dir.resolve()
    if not (args.work_dir / "grpo.toml").exists():
        parser.error(f"{args.work_dir / 'grpo.toml'} not found: run `grpo demo --quick` first")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    infos = [commit_info(commit) for commit in args.commits]
    runs: dict[str, list[dict[str, Any]]] = {info["sha"]: [] for info in infos}
    for repeat in range(args.repeats):
        for info in infos:
            head = f"[{repeat + 1}/{args.repeats}] {info['commit']} {info['subject'][:60]}"
            print(head, file=sys.stderr, flush=True)
            run = run_commit(info["sha"], args)
            runs[info["sha"]].append(run)
            done = run.get("error") or f"step {run['time/step']:.4f} s"
            print(f"    {done}", file=sys.stderr, flush=True)
    results = [{**info, **combine(runs[info["sha"]])} for info in infos]
    config = args.work_dir / "grpo.toml"
    print(f"\n{args.steps} steps, {args.threads} thread(s), steps > {args.warmup}, ", end="")
    print(f"{args.repeats} repeat(s); config {config}\n")
    print(table(results))
    for r in results:
        if r.get("dropped"):
            print(f"\n{r['commit']}: config keys it does not know, dropped: {r['dropped']}")
    if args.json:
        settings = {**vars(args), "work_dir": str(args.work_dir), "json": str(args.json)}
        args.json.write_text(json.dumps({"args": settings, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
