"""The kvstore kinds and what each means for training, in one place that imports neither MXNet
nor the launcher."""
from typing import Optional

KINDS = ("local", "device", "nccl", "dist_sync", "dist_async", "dist_device_sync")
DIST_KINDS = ("dist_sync", "dist_async", "dist_device_sync")  # what a launched job can use


class Mode(str):
    """A kvstore kind, with what it implies; it is the kind's name, so it goes wherever MXNet
    takes one (``mx.kv.create(mode)``) and compares equal to it."""

    def __new__(cls, name: str) -> "Mode":
        if name not in KINDS:
            raise ValueError(f"unknown kvstore kind {name!r}; use one of: {', '.join(KINDS)}")
        return super().__new__(cls, name)

    @classmethod
    def of(cls, kv) -> Optional["Mode"]:
        """The mode of an ``mx.kv.KVStore`` (None for none; a kind of another library's
        kvstore is kept as it is, with none of the properties)."""
        return None if kv is None else str.__new__(cls, kv.type)

    @property
    def distributed(self) -> bool:
        """Workers of a parameter-server job, one distributed kvstore each."""
        return self in DIST_KINDS

    @property
    def updates_on_servers(self) -> bool:
        """The servers run the optimizer on every push (``dist_async``): the workers never
        see one another's gradients, and sums of metrics through the kvstore are impossible."""
        return self == "dist_async"

    @property
    def needs_agreement(self) -> bool:
        """The workers step together, so they must agree on settings, stop requests and
        metrics (``dist_sync``, ``dist_device_sync``)."""
        return self.distributed and not self.updates_on_servers
