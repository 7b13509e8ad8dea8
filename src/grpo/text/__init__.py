"""Pure functions of completion and solution text (no models, no config): the reasoning
counts that training logs and evaluation reads, and the ``\\boxed{…}`` answer that both
the datasets and the math rewards extract."""
