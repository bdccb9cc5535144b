"""The launcher's errors, imported by every layer (options, hosts, transports) without a cycle."""


class LaunchError(ValueError):
    """Bad launcher input, found before any process starts. The message is one line."""


class Stopped(Exception):
    """The job was stopped on request (a signal the CLI turned into a :class:`StopRequest`);
    raised once every process is down."""

    def __init__(self, signum: int, left=(), remote_silence: float = 0.0):
        super().__init__(f"stopped by signal {signum}")
        self.signum = signum
        self.left = list(left)  # processes that did not die (see ProcessGroup.unreaped)
        # over ssh: a host the launcher could not reach ends its processes itself this long
        # after the launcher's last word
        self.remote_silence = remote_silence


class StopRequest:
    """Asks a running job to stop. A signal handler only calls :meth:`request` (no exception
    is raised into whatever the launcher was doing); the monitor loop sees it within a poll
    and the job is torn down like any other ending."""

    def __init__(self):
        self.signum = None

    def request(self, signum: int) -> None:
        if self.signum is None:
            self.signum = signum

    def __bool__(self) -> bool:
        return self.signum is not None
