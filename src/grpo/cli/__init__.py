"""The ``grpo`` command line (one module per command group, assembled in :mod:`grpo.cli.main`)
and what only it uses: the configuration reference and the memory planner."""
