#!/usr/bin/env bash
# Fresh machine → lint and the whole test suite, slow end-to-end tests included.
source "$(dirname "${BASH_SOURCE[0]}")/venv.sh"
install_project "[dev]"
.venv/bin/ruff check src tests benchmarks
exec .venv/bin/python -m pytest -m "slow or not slow" -p no:cacheprovider -q "$@"
