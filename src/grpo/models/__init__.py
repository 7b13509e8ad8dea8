"""The model layer: loading policies and tokenizers, wrapper look-ups, per-token log-probs."""
