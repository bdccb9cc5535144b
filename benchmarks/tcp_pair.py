"""Raw TCP between two hosts, the hand-written baseline of benchmarks/network.py:
`tcp_pair.py recv ADDRESS PORT` listens and prints the rate it received at (bytes/s, first
byte to last); `tcp_pair.py send ADDRESS PORT MBYTES` connects and sends."""
import socket
import time

BLOCK = 1 << 16


def recv(address: str, port: int) -> None:
    with socket.create_server((address, port)) as listener:
        print("listening", flush=True)
        conn, _ = listener.accept()
        with conn:
            got = len(conn.recv(BLOCK))
            start = time.perf_counter()
            while True:
                chunk = conn.recv(BLOCK)
                if not chunk:
                    break
                got += len(chunk)
            print(got / (time.perf_counter() - start), flush=True)


def send(address: str, port: int, mbytes: float) -> None:
    block, left = b"\0" * BLOCK, int(mbytes * 2 ** 20)
    with socket.create_connection((address, port), timeout=30) as conn:
        while left > 0:
            conn.sendall(block[:min(BLOCK, left)])
            left -= BLOCK


if __name__ == "__main__":
    from positional import positional
    args = positional(__doc__, 3, 4)
    if args[0] == "recv":
        recv(args[1], int(args[2]))
    else:
        send(args[1], int(args[2]), float(args[3]))
