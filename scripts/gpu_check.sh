#!/usr/bin/env bash
# The GPU check (benchmarks/gpu_check.py): rollout tokens/s of grpo's engine against
# transformers.generate, GRPO steps of grpo against TRL, peak GPU memory, on a
# Qwen2.5-0.5B-shaped random model in bf16; results in --out (default gpu_check/).
# --dry runs it on the CPU with a tiny model and 1 step (the test suite does).
# Uses .venv when there is one, else python3 with this checkout's src/ on the path.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON="${PYTHON:-python3}"; fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
exec "$PYTHON" benchmarks/gpu_check.py "$@"
