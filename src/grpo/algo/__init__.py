"""The algorithm: pure tensor functions, each with its formula (no I/O, no models, no config)."""
