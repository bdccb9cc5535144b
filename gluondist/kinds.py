"""The kvstore kinds, in one place that imports neither MXNet nor the launcher."""

KINDS = ("local", "device", "nccl", "dist_sync", "dist_async", "dist_device_sync")
DIST_KINDS = ("dist_sync", "dist_async", "dist_device_sync")  # what a launched job can use
