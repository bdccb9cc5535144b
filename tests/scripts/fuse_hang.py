"""A FUSE file system that never answers a read: `fuse_hang.py MOUNTPOINT MARKER` (as root).

It mounts MOUNTPOINT with one file, `f`, and serves the kernel's requests over /dev/fuse
(the raw protocol, version 7.19), except that a READ is never answered: it writes MARKER and
waits. Linux then keeps the reader in uninterruptible sleep (state D) once a fatal signal
arrives, because the request is already in user space ("wait it out", fs/fuse/dev.c) - the
way a process on a hung NFS mount cannot die. Killing this daemon closes /dev/fuse, which
aborts the connection and lets the reader die; then unmount (`umount -l MOUNTPOINT`).
"""
import ctypes
import errno
import os
import stat
import struct
import sys

LOOKUP, FORGET, GETATTR, OPEN, READ, INIT, INTERRUPT, BATCH_FORGET = 1, 2, 3, 14, 15, 26, 36, 42
NO_REPLY = (FORGET, INTERRUPT, BATCH_FORGET)
IN_HEADER = struct.Struct("<IIQQIIII")  # len opcode unique nodeid uid gid pid padding
OUT_HEADER = struct.Struct("<IiQ")  # len error unique
ROOT, FILE = 1, 2


def attr(node: int) -> bytes:
    mode = (stat.S_IFDIR | 0o755) if node == ROOT else (stat.S_IFREG | 0o644)
    # ino size blocks atime mtime ctime (ns x3) mode nlink uid gid rdev blksize padding
    return struct.pack("<QQQQQQIIIIIIIIII", node, 0 if node == ROOT else 4096, 8, 0, 0, 0,
                       0, 0, 0, mode, 1, 0, 0, 0, 4096, 0)


def reply(fd: int, unique: int, body: bytes = b"", error: int = 0) -> None:
    os.write(fd, OUT_HEADER.pack(OUT_HEADER.size + len(body), -error, unique) + body)


def serve(fd: int, marker: str) -> None:
    while True:
        request = os.read(fd, 1 << 17)
        _, opcode, unique, node, *_ = IN_HEADER.unpack_from(request)
        body = request[IN_HEADER.size:]
        if opcode in NO_REPLY:
            continue
        if opcode == INIT:
            # major minor max_readahead flags max_background congestion_threshold max_write
            reply(fd, unique, struct.pack("<IIIIHHI", 7, 19, 1 << 16, 0, 16, 12, 1 << 16))
        elif opcode == LOOKUP and node == ROOT and body.rstrip(b"\0") == b"f":
            # nodeid generation entry_valid attr_valid (and their ns), then the attributes
            reply(fd, unique, struct.pack("<QQQQII", FILE, 0, 60, 60, 0, 0) + attr(FILE))
        elif opcode == GETATTR and node in (ROOT, FILE):
            reply(fd, unique, struct.pack("<QII", 60, 0, 0) + attr(node))
        elif opcode == OPEN:
            reply(fd, unique, struct.pack("<QII", 0, 0, 0))
        elif opcode == READ:
            with open(marker, "w") as f:  # and never answer
                f.write(str(os.getpid()))
        elif opcode == LOOKUP:
            reply(fd, unique, error=errno.ENOENT)
        else:
            reply(fd, unique, error=errno.ENOSYS)


def main(mountpoint: str, marker: str) -> None:
    fd = os.open("/dev/fuse", os.O_RDWR)
    libc = ctypes.CDLL(None, use_errno=True)
    options = f"fd={fd},rootmode=40000,user_id=0,group_id=0".encode()
    if libc.mount(b"gluondist-test", mountpoint.encode(), b"fuse", 0, options) != 0:
        sys.exit(f"mount: {os.strerror(ctypes.get_errno())}")
    serve(fd, marker)


if __name__ == "__main__":
    main(*sys.argv[1:3])
