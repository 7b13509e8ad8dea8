"""``grpo demo --task smollm2 --quick``: the real model from its GGUF, measured, trained two
steps and measured again; the table has every kind, and what the run leaves loads."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from grpo.demo.smollm2_task import KINDS

pytestmark = pytest.mark.slow


@pytest.mark.timeout(960)
def test_the_quick_demo_prints_the_table_by_kind_and_leaves_a_plain_model(
    tmp_path: Path, smollm2_gguf: Path
) -> None:
    work_dir = tmp_path / "demo"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "grpo",
            "demo",
            "--task",
            "smollm2",
            "--quick",
            "--quiet",
            "--work-dir",
            str(work_dir),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert smollm2_gguf.name in out
    table = out.split("held-out greedy accuracy", 1)[1]
    for kind in (*KINDS, "all"):
        row = re.search(
            rf"^  {re.escape(kind)}\s+(\d+)\s+([\d.]+)%\s+([\d.]+)%\s+([+-][\d.]+)$",
            table,
            re.MULTILINE,
        )
        assert row is not None, f"no row for {kind}:\n{table}"
        assert int(row[1]) == (8 if kind == "all" else 2)
    assert re.search(r"pass@8 \(8 samples, T=1\)\s+[\d.]+%\s+[\d.]+%", table)
    config = (work_dir / "grpo.toml").read_text()
    assert f'path = "{smollm2_gguf}"' in config  # the GGUF itself, as a user names it
    final = work_dir / "run" / "final"
    assert (final / "model.safetensors").is_file() and (final / "tokenizer.json").is_file()
    assert "quantization_config" not in (final / "config.json").read_text()
