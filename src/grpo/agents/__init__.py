"""Multi-turn rollouts: environments, tools, and the turn loop on exact token ids."""
