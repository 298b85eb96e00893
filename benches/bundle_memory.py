#!/usr/bin/env python3
"""Peak resident memory of `repro bundle verify` and `repro replay --bundle` against the size a
bundle inflates to (issue 26, item 10): a legitimate bundle of 100 MB and one of 1 GB (one
member of zeros, a correct MANIFEST), and a 3 GB bomb (a few hundred KB of zstd, refused at
the 1 GiB limit). Peak RSS is read from wait4's resource usage of each repro process.

Usage: python3 benches/bundle_memory.py [--repro PATH] [--before PATH] [--sizes 100e6,1e9,3e9]

--before names a second binary (main's, built in a temporary clone) for a before/after table.
Needs the `zstd` command line tool.
"""
import argparse
import hashlib
import io
import os
import shutil
import subprocess
import tarfile
import tempfile
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHUNK = 1 << 20


class Zeros(io.RawIOBase):
    """A file of `n` zero bytes, read in chunks."""

    def __init__(self, n):
        self.left = n

    def readable(self):
        return True

    def readinto(self, b):
        k = min(len(b), self.left)
        b[:k] = bytes(k)
        self.left -= k
        return k


def zeros_sha256(n):
    h = hashlib.sha256()
    block = bytes(CHUNK)
    while n > 0:
        k = min(n, CHUNK)
        h.update(block[:k])
        n -= k
    return h.hexdigest()


def make_bundle(path, n, manifest_ok=True):
    """A bundle of one member `data/zeros.bin` of `n` bytes and its MANIFEST, as repro writes
    them (GNU headers, mode 0644, MANIFEST last), compressed by the zstd tool with a checksum."""
    digest = zeros_sha256(n) if manifest_ok else "0" * 64
    manifest = f"{digest}  data/zeros.bin\n".encode()
    with open(path, "wb") as out:
        z = subprocess.Popen(["zstd", "-q", "-3", "-c", "-"], stdin=subprocess.PIPE, stdout=out)
        with tarfile.open(fileobj=z.stdin, mode="w|", format=tarfile.GNU_FORMAT) as t:
            for name, size, data in [("data/zeros.bin", n, Zeros(n)),
                                     ("MANIFEST", len(manifest), io.BytesIO(manifest))]:
                info = tarfile.TarInfo(name)
                info.size, info.mode, info.mtime = size, 0o644, 0
                t.addfile(info, io.BufferedReader(data, CHUNK) if isinstance(data, Zeros) else data)
        z.stdin.close()
        if z.wait() != 0:
            raise SystemExit("zstd failed")


def peak(argv, cwd, env):
    """(exit code, peak RSS in MiB, seconds) of one run."""
    t = time.perf_counter()
    p = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, ru = os.wait4(p.pid, 0)
    return os.waitstatus_to_exitcode(status), ru.ru_maxrss / 1024, time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repro", default=os.path.join(HERE, "target/release/repro"))
    ap.add_argument("--before", default=None)
    ap.add_argument("--sizes", default="100e6,1e9,3e9")
    a = ap.parse_args()
    binaries = [("after", os.path.abspath(a.repro))]
    if a.before:
        binaries.insert(0, ("before", os.path.abspath(a.before)))
    base = tempfile.mkdtemp(prefix="repro-bundle-memory-")
    env = dict(os.environ, TMPDIR=base, NO_COLOR="1", XDG_CACHE_HOME=os.path.join(base, "cache"))
    try:
        empty = os.path.join(base, "empty")
        os.mkdir(empty)
        print(f"{'bundle':>22} {'file KB':>9} {'binary':>7} {'verify exit':>11} {'verify MiB':>10} "
              f"{'verify s':>8} {'replay exit':>11} {'replay MiB':>10} {'replay s':>8}")
        for size in [int(float(s)) for s in a.sizes.split(",")]:
            path = os.path.join(base, f"b-{size}.tar.zst")
            legit = size <= (1 << 30) - (1 << 16)
            make_bundle(path, size, manifest_ok=legit)
            label = f"{size / 1e9:g} GB {'legitimate' if legit else 'bomb'}"
            for name, repro in binaries:
                v = peak([repro, "bundle", "verify", path], empty, env)
                # No record in it: replay stops after the unpack, which is what is measured.
                r = peak([repro, "replay", "0" * 12, "--bundle", path], empty, env)
                print(f"{label:>22} {os.path.getsize(path) / 1e3:9.0f} {name:>7} {v[0]:11} {v[1]:10.0f} "
                      f"{v[2]:8.1f} {r[0]:11} {r[1]:10.0f} {r[2]:8.1f}", flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
