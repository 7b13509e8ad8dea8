"""The one error every configuration mistake raises."""


class ConfigError(ValueError):
    """A bad configuration value; the message names the key."""
