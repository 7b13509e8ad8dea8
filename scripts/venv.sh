# Sourced by demo.sh and test.sh: create and fill .venv when it is missing or incomplete.
# The CPU build of PyTorch is installed first, pinned, so nothing pulls a multi-GB CUDA build;
# set GRPO_TORCH to install another (e.g. GRPO_TORCH="torch" on a GPU machine).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
    .venv/bin/python -m pip install --quiet --upgrade pip
    .venv/bin/python -m pip install --quiet "${GRPO_TORCH:-torch==2.13.0}"
fi
install_project() {  # $1: the extras, e.g. "" or "[dev]"
    local marker=".venv/.grpo-installed$1"
    if [ ! -f "$marker" ] || [ pyproject.toml -nt "$marker" ]; then
        .venv/bin/python -m pip install --quiet -e ".$1"
        touch "$marker"
    fi
}
