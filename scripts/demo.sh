#!/usr/bin/env bash
# Fresh machine → the embedded default: warm start, GRPO, held-out accuracy before/after.
# With the extras its closing suggestions need: plot (grpo report) and tensorboard (the
# run's tensorboard/ directory and the tensorboard command).
source "$(dirname "${BASH_SOURCE[0]}")/venv.sh"
install_project "[plot,tensorboard]"
exec .venv/bin/grpo demo "$@"
