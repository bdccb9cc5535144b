"""free_ports: distinct, free, and out of the range outgoing connections draw from."""
import random
import socket

from gluondist.launcher import ports


def test_ports_are_distinct_free_and_below_the_ephemeral_range():
    low = ports.ephemeral_low()
    got = ports.free_ports(8)
    assert len(set(got)) == 8
    if low - ports.FLOOR >= 1024:
        assert all(ports.FLOOR <= p < low for p in got), (got, low)
    for p in got:
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))


def test_a_taken_port_is_passed_over():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]

        class Taken(random.Random):
            picks = iter([port])

            def randrange(self, a, b):  # the taken port first, then any
                return next(self.picks, None) or super().randrange(a, b)

        got = ports.free_ports(1, rng=Taken(0))
    assert got != [port]


def test_without_room_below_the_range_the_os_chooses(monkeypatch):
    monkeypatch.setattr(ports, "ephemeral_low", lambda: ports.FLOOR + 10)
    got = ports.free_ports(3)
    assert len(set(got)) == 3 and all(p > 0 for p in got)


def test_an_unreadable_range_means_linuxs_default(tmp_path):
    assert ports.ephemeral_low(str(tmp_path / "missing")) == 32768
    (tmp_path / "range").write_text("1024\t65000\n")
    assert ports.ephemeral_low(str(tmp_path / "range")) == 1024
