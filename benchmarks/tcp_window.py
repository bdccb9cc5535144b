"""Why gluondist bounds the chunks in flight (gluondist.kvstore.CHUNKS_IN_FLIGHT), in raw TCP
without MXNet: a worker's step as a colocated server sees it, on two namespace hosts (as root).

    python benchmarks/tcp_window.py [--rate 200mbit] [--mbytes 8] [--steps 16] [--repeats 2]

Host b plays the worker: each step it sends MBYTES in chunks to host a on one connection, and
a sends each chunk back on a second connection as soon as it has all of it (ps-lite's two
connections, one per direction; the server's sum takes no time here). A step ends when b has
every chunk back. b keeps at most WINDOW chunks unanswered (0: all of them). Each case prints
the median step time's efficiency: MBYTES at the one-way rate measured first on the same
connection ÷ the step time. Cases alternate, --repeats rounds.

    python benchmarks/tcp_window.py --node a PORT          (internal: host a's side)
    python benchmarks/tcp_window.py --node b ADDRESS PORT CHUNK COUNT STEPS WINDOW
"""
import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
import netns  # noqa: E402

CASES = ((1 << 20, 0), (1 << 20, 2), (1 << 19, 2), (1 << 18, 2))  # (chunk bytes, window)
PROBE = 8 << 20


def _receive(conn: socket.socket, nbytes: int) -> None:
    while nbytes > 0:
        got = len(conn.recv(min(1 << 20, nbytes)))
        if not got:
            raise EOFError
        nbytes -= got


def serve(port: int) -> None:
    """Host a: answer every chunk that arrives on the first connection on the second."""
    listener = socket.create_server(("0.0.0.0", port))
    print("listening", flush=True)
    pushes, _ = listener.accept()
    pulls, _ = listener.accept()
    chunk = int(pushes.recv(16).decode())
    _receive(pushes, PROBE)
    pulls.sendall(b"k")
    answer = b"\0" * chunk
    try:
        while True:
            _receive(pushes, chunk)
            pulls.sendall(answer)
    except (EOFError, ConnectionError):
        pass


def worker(address: str, port: int, chunk: int, count: int, steps: int, window: int) -> None:
    """Host b: the probe, then ``steps`` steps; prints the one-way rate and each step time."""
    pushes = socket.create_connection((address, port))
    pulls = socket.create_connection((address, port))
    pushes.sendall(str(chunk).ljust(16).encode())
    start = time.perf_counter()
    pushes.sendall(b"\0" * PROBE)
    _receive(pulls, 1)
    rate = PROBE / (time.perf_counter() - start)
    payload, times = b"\0" * chunk, []
    for _ in range(steps + 2):  # the first two warm the connections up
        credit = threading.Semaphore(window or count)
        start = time.perf_counter()

        def push():
            for _ in range(count):
                credit.acquire()
                pushes.sendall(payload)
        sender = threading.Thread(target=push)
        sender.start()
        for _ in range(count):
            _receive(pulls, chunk)
            credit.release()
        sender.join()
        times.append(time.perf_counter() - start)
    print(rate, *times[2:], flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--rate", default="200mbit")
    parser.add_argument("--mbytes", type=int, default=8)
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    reason = netns.unavailable()
    if reason:
        raise SystemExit(reason)
    nbytes, found = args.mbytes << 20, {case: [] for case in CASES}
    with tempfile.TemporaryDirectory() as tmp, netns.Cluster(2, tmp, rate=args.rate) as cluster:
        a, b = cluster.hosts
        for rep in range(args.repeats):
            for chunk, window in CASES if rep % 2 == 0 else CASES[::-1]:
                server = subprocess.Popen(["ip", "netns", "exec", cluster.ns[a], sys.executable,
                                           __file__, "--node", "a", "7001"],
                                          stdout=subprocess.PIPE, text=True)
                try:
                    assert server.stdout.readline().strip() == "listening"
                    out = cluster.run(b, sys.executable, __file__, "--node", "b", a, "7001",
                                      str(chunk), str(nbytes // chunk), str(args.steps),
                                      str(window), capture_output=True, text=True,
                                      timeout=300, check=True).stdout.split()
                finally:
                    server.kill()
                    server.wait()
                rate, steps = float(out[0]), [float(t) for t in out[1:]]
                efficiency = nbytes / rate / statistics.median(steps)
                found[chunk, window].append(efficiency)
                print(f"{chunk >> 10} KiB chunks, window {window or 'none'}: one way "
                      f"{rate * 8 / 1e6:.0f} Mbit/s, efficiency {efficiency:.3f}", flush=True)
    for (chunk, window), figures in found.items():
        print(f"{chunk >> 10} KiB x {window or 'all'} in flight: median efficiency "
              f"{statistics.median(figures):.3f} ({', '.join(f'{e:.3f}' for e in figures)})")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--node"]:
        if sys.argv[2] == "a":
            serve(int(sys.argv[3]))
        else:
            worker(sys.argv[3], *map(int, sys.argv[4:9]))
    else:
        main()
