"""The command line and its tools: the config reference and the memory planner."""
