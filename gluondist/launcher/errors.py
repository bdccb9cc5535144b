"""The launcher's errors, imported by every layer (options, hosts, transports) without a cycle."""


class LaunchError(ValueError):
    """Bad launcher input, found before any process starts. The message is one line."""
