"""train(): the loop, its set-up from the config, the run's types, the update and saving."""
