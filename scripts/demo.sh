#!/usr/bin/env bash
# Fresh machine → the embedded default: warm start, GRPO, held-out accuracy before/after.
source "$(dirname "${BASH_SOURCE[0]}")/venv.sh"
install_project ""
exec .venv/bin/grpo demo "$@"
