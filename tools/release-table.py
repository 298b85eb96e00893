#!/usr/bin/env python3
"""Regenerates src/engines/toolchain/releases.toml, the table of CUDA toolchain releases built
into repro: for each NVRTC and nvcc release (major.minor) and each component library, the
newest wheel of every package with its sha256 for x86_64 and aarch64.

Everything comes from pip's ordinary client: `pip index versions` for the versions, and
`pip install --dry-run --report` (which resolves without installing) for each wheel's
digest as the package index publishes it. Run it where pip can reach the index:

    python3 tools/release-table.py > src/engines/toolchain/releases.toml

and review the diff. `repro toolchain install` verifies every digest again when it downloads
a wheel, so a wrong entry fails an install instead of passing unseen.
"""

import json
import os
import re
import subprocess
import sys
import tempfile

ARCHES = {
    "x86_64": ["manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_27_x86_64",
               "manylinux_2_28_x86_64", "manylinux_2_12_x86_64", "manylinux2010_x86_64",
               "manylinux_2_34_x86_64"],
    "aarch64": ["manylinux_2_17_aarch64", "manylinux2014_aarch64", "manylinux_2_27_aarch64",
                "manylinux_2_28_aarch64", "manylinux_2_34_aarch64"],
}

# NVRTC and nvcc releases the table covers. CUDA 12's nvidia-cuda-nvcc-cu12 wheels carry
# ptxas, NVVM and headers but no nvcc driver, so nvcc starts at 13.0.
NVRTC_RELEASES = ["12.4", "12.5", "12.6", "12.8", "12.9", "13.0", "13.1", "13.2", "13.3",
                  "13.4", "13.5"]
NVCC_RELEASES = ["13.0", "13.1", "13.2", "13.3", "13.4", "13.5"]
NVCC_PACKAGES = ["nvidia-cuda-nvcc", "nvidia-nvvm", "nvidia-cuda-crt", "nvidia-cuda-runtime",
                 "nvidia-cuda-cccl"]


def cu(package, release):
    """The package's name for a CUDA release: CUDA 12 wheels carry `-cu12`."""
    return package + "-cu12" if release.startswith("12.") else package


def versions(package, cache={}):
    if package not in cache:
        out = subprocess.run(
            [sys.executable, "-m", "pip", "index", "versions", "--disable-pip-version-check",
             package], capture_output=True, text=True, timeout=300)
        line = next((l for l in out.stdout.splitlines() if "Available versions:" in l), "")
        cache[package] = [v.strip() for v in line.split(":", 1)[-1].split(",") if v.strip()]
    return cache[package]


def key(v):
    return [int(x) if x.isdigit() else -1 for x in re.split(r"[.]", v)]


def newest(package, prefix=None):
    vs = [v for v in versions(package) if re.fullmatch(r"[0-9.]+(\.post[0-9]+)?", v)]
    if prefix:
        vs = [v for v in vs if v.startswith(prefix + ".")]
    return max(vs, key=key) if vs else None


def earlier_cccl(package, release):
    """CCCL's headers (CUB, Thrust, libcu++) where NVIDIA published no nvidia-cuda-cccl wheel
    of `release` (none from 13.4 on): the newest of an earlier release of the same major,
    as `repro toolchain pin` takes it from pip's index."""
    if package != "nvidia-cuda-cccl":
        return None
    major, minor = (int(x) for x in release.split(".")[:2])
    vs = [v for v in versions(package) if re.fullmatch(r"[0-9.]+", v)]
    vs = [v for v in vs if int(v.split(".")[0]) == major and int(v.split(".")[1]) < minor]
    return max(vs, key=key) if vs else None


def digests(pins):
    """{(package, version): {arch: sha256}} for `pins` [(package, version)]. pip resolves one
    version of a package at a time, so the pins go in rounds with each package once."""
    found = {}
    rounds = []
    for p, v in pins:
        r = next((r for r in rounds if p not in r), None)
        if r is None:
            r = {}
            rounds.append(r)
        r[p] = v
    for r in rounds:
        for key, sha in digests_once(sorted(r.items())).items():
            found.setdefault(key, {}).update(sha)
    return found


def digests_once(pins):
    found = {}
    for arch, platforms in ARCHES.items():
        with tempfile.TemporaryDirectory() as tmp:
            report = os.path.join(tmp, "report.json")
            cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed",
                   "--no-deps", "--only-binary=:all:", "--disable-pip-version-check", "-q",
                   "--target", os.path.join(tmp, "t"), "--report", report]
            for p in platforms:
                cmd += ["--platform", p]
            cmd += [f"{p}=={v}" for p, v in pins]
            subprocess.run(cmd, check=True, timeout=3600)
            for item in json.load(open(report))["install"]:
                name = item["metadata"]["name"].lower()
                sha = item["download_info"]["archive_info"]["hashes"]["sha256"]
                found.setdefault((name, item["metadata"]["version"]), {})[arch] = sha
    return found


def wheels_toml(pins, found):
    rows = []
    for p, v in pins:
        sha = found.get((p, v), {})
        inner = ", ".join(f'{a} = "{sha[a]}"' for a in ARCHES if a in sha)
        rows.append(f'  {{ package = "{p}", version = "{v}", sha256 = {{ {inner} }} }},')
    return "wheels = [\n" + "\n".join(rows) + "\n]\n"


def main():
    tables = []  # (header, pins)
    for r in NVRTC_RELEASES:
        p = cu("nvidia-cuda-nvrtc", r)
        v = newest(p, r)
        if v:
            tables.append((f'[nvrtc."{r}"]', [(p, v)]))
    for r in NVCC_RELEASES:
        pins = [(p, newest(p, r) or earlier_cccl(p, r)) for p in NVCC_PACKAGES]
        if all(v for _, v in pins):
            tables.append((f'[nvcc."{r}"]', pins))
    for r in NVRTC_RELEASES:
        p = cu("nvidia-cublas", r)
        v = newest(p, r)
        if v:
            tables.append((f'[components.cublas."{r}"]', [(p, v)]))
        cudnn = "nvidia-cudnn-cu12" if r.startswith("12.") else "nvidia-cudnn-cu13"
        v = newest(cudnn)
        if v:
            tables.append((f'[components.cudnn."{r}"]', [(cudnn, v)]))
        v = newest("nvidia-cutlass")
        if v:
            tables.append((f'[components.cutlass."{r}"]', [("nvidia-cutlass", v)]))
        # Following CUDA's numbering: the release's own.
        for name, package in [("nvtx", "nvidia-nvtx"), ("profiler", "nvidia-cuda-profiler-api")]:
            p = cu(package, r)
            v = newest(p, r)
            if v:
                tables.append((f'[components.{name}."{r}"]', [(p, v)]))
        # Numbered on their own: the newest for the release's major CUDA version.
        for name, package in [("curand", cu("nvidia-curand", r)),
                              ("nccl", "nvidia-nccl-cu12" if r.startswith("12.") else "nvidia-nccl-cu13")]:
            v = newest(package)
            if v:
                tables.append((f'[components.{name}."{r}"]', [(package, v)]))
    everything = sorted({pv for _, pins in tables for pv in pins})
    found = digests(everything)
    print("# The CUDA toolchain releases built into repro, generated by tools/release-table.py")
    print("# from pip's index: do not edit by hand. Each wheel's sha256 per CPU architecture.")
    print("schema = 1\n")
    for header, pins in tables:
        # A release whose wheels are missing for an architecture keeps the ones it has:
        # `repro toolchain pin` says which architecture lacks a digest.
        print(header)
        print(wheels_toml(pins, found))


if __name__ == "__main__":
    main()
