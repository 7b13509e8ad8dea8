#!/usr/bin/env bash
# Fresh machine → the embedded default: warm start, GRPO, held-out accuracy before/after.
# With the extras its closing suggestions need: plot (grpo report) and tensorboard (the
# run's tensorboard/ directory and the tensorboard command); and those of the real-model demo
# (--task smollm2): gguf (the model is a .gguf file) and peft (it trains LoRA adapters).
source "$(dirname "${BASH_SOURCE[0]}")/venv.sh"
install_project "[plot,tensorboard,gguf,peft]"
exec .venv/bin/grpo demo "$@"
