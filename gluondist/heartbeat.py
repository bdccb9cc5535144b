"""Placeholder until the launcher's progress channel lands: beat() reports nothing."""


def beat(batches: int = 1) -> None:
    """Report ``batches`` more finished training batches to the launcher (no-op here)."""
