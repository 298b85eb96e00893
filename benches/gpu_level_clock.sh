#!/usr/bin/env bash
# #29 goal 3: does a small kernel's level follow the SM clock it ran at, or the GPU's
# temperature? (outside repro; level_clock/level_clock.c says what one process does). On the
# GPU machine:
#
#   bash benches/gpu_level_clock.sh [PROCESSES] [WINDOWS] [SAMPLES]
#
# Runs PROCESSES processes one after another, with nvidia-smi logging the GPU's temperature,
# power and clock every 200 ms beside them, and prints every process's windows; then, across
# the processes (PROCESSES >= 2), the CV of the first window's median (what one repro
# invocation reports), the SM clocks the spin probe read, the correlation of the median with
# each clock and with the temperature, and the CV of the median scaled to the mean clock (what
# it would be if the clock were the whole story); and over all windows in time order, the
# spread of the windows' medians inside a process and between neighbouring windows.
# `gpu_level_clock.sh 1 150` is one long process, every window on a line. LEVEL_NO_SMI=1
# leaves nvidia-smi out. The spin probes are ordinary launches on created streams, which make
# the context's later kernels about 7% slower from about a second on (the driver's behaviour
# that benches/gpu_stream_state.sh shows): a process's windows compare with other processes'
# only while it ends within about a second (the default 4 windows of 100 samples do).
set -euo pipefail
processes="${1:-30}"; windows="${2:-4}"; samples="${3:-100}"
here="$(cd "$(dirname "$0")" && pwd)"
cuda="${CUDA_HOME:-/usr/local/cuda}"
work="$(mktemp -d)"
smi=""
trap '[ -n "$smi" ] && kill "$smi" 2>/dev/null; rm -rf "$work"' EXIT
arch="sm_$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)"
"$cuda/bin/nvcc" -cubin -arch="$arch" -O3 -o "$work/kernel.cubin" "$here/level_clock/kernel.cu"
gcc -O2 -o "$work/level_clock" "$here/level_clock/level_clock.c" -I"$cuda/include" \
  -I"$here/stream_state" -L"$cuda/lib64/stubs" -lcuda
cd "$work"
nvidia-smi --query-gpu=uuid,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader
# Each line: seconds since the epoch, temperature (C), power (W), SM clock (MHz).
if [ "${LEVEL_NO_SMI:-0}" != 1 ]; then
  (while :; do
     printf '%s ' "$(date +%s.%N)"
     nvidia-smi --query-gpu=temperature.gpu,power.draw,clocks.sm --format=csv,noheader,nounits \
       | tr -d ',' | head -1
     sleep 0.2
   done > smi.txt) &
  smi=$!
fi
touch smi.txt
for p in $(seq "$processes"); do
  ./level_clock "$windows" "$samples" > "p$p.txt"
done
[ -z "$smi" ] || kill "$smi" 2>/dev/null || true
smi=""
python3 - "$processes" <<'PY'
import bisect, statistics as st, sys
P = int(sys.argv[1])
runs = [[[float(x) for x in l.split()] for l in open(f"p{p}.txt")] for p in range(1, P + 1)]
smi = sorted(tuple(float(x) for x in l.split()) for l in open("smi.txt") if len(l.split()) == 4)
times = [s[0] for s in smi]
def temp(t):
    """The temperature nvidia-smi read nearest before time t."""
    i = max(bisect.bisect_right(times, t) - 1, 0)
    return smi[i][1] if smi else float("nan")
def cv(xs): return 100 * st.stdev(xs) / st.mean(xs)
def corr(xs, ys):
    mx, my = st.mean(xs), st.mean(ys)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    return sxy / ((sum((x - mx) ** 2 for x in xs) * sum((y - my) ** 2 for y in ys)) ** 0.5 or 1)
t0 = runs[0][0][4]
print(f"{'process':>7} {'t (s)':>6} {'temp C':>6} {'median us':>10} {'before':>8} {'during':>8}"
      f" {'after':>8}   windows' medians")
for i, r in enumerate(runs, 1):
    m, b, d, a, t = r[0]
    if P == 1:
        for m, b, d, a, t in r:
            print(f"{i:7} {t - t0:6.1f} {temp(t):6.0f} {m:10.4f} {b:8.1f} {d:8.1f} {a:8.1f}")
        continue
    print(f"{i:7} {t - t0:6.1f} {temp(t):6.0f} {m:10.4f} {b:8.1f} {d:8.1f} {a:8.1f}   "
          + " ".join(f"{w[0]:.4f}" for w in r))
if P >= 2:
    m0 = [r[0][0] for r in runs]
    print(f"\nCV of the first window's median across {P} processes: {cv(m0):.3f}%")
    print(f"CV of the mean of each process's windows: "
          f"{cv([st.mean(w[0] for w in r) for r in runs]):.3f}%")
    for k, name in ((1, "before"), (2, "during"), (3, "after")):
        f = [r[0][k] for r in runs]
        scaled = [m * x / st.mean(f) for m, x in zip(m0, f)]
        print(f"clock {name:6}: {st.mean(f):.1f} MHz, CV {cv(f):.3f}%, correlation with the"
              f" median {corr(m0, f):+.2f}; CV of the median at the mean clock {cv(scaled):.3f}%")
    temps = [temp(r[0][4]) for r in runs]
    if smi and len(set(temps)) > 1:
        print(f"temperature {min(temps):.0f}-{max(temps):.0f} C, correlation with the median"
              f" {corr(m0, temps):+.2f}")
ws = [w for r in runs for w in r]
med = [w[0] for w in ws]
print(f"\nall {len(ws)} windows in time order: CV {cv(med):.3f}%, of neighbours' differences"
      f" {100 * st.stdev([b - a for a, b in zip(med, med[1:])]) / st.mean(med) / 2 ** 0.5:.3f}%")
if len(ws) >= 3:
    temps = [temp(w[4]) for w in ws]
    if smi and len(set(temps)) > 1:
        print(f"temperature {min(temps):.0f}-{max(temps):.0f} C, correlation of the windows'"
              f" medians with it {corr(med, temps):+.2f}")
within = [cv([w[0] for w in r]) for r in runs if len(r) >= 2]
if within:
    print(f"inside a process, CV of the windows' medians: median {st.median(within):.3f}%,"
          f" max {max(within):.3f}%")
PY
