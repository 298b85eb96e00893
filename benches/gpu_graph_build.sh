#!/usr/bin/env bash
# #29 goal 2: graph mode's set-up (capturing and instantiating a job's graphs) on one thread
# against several (outside repro; graph_build/graph_build.c says what it times). On the GPU
# machine:
#
#   bash benches/gpu_graph_build.sh [GRAPHS] [BATCH] [REPS] [THREADS...]
#
# Defaults: 17 graphs of 512 launches (repro's 16 placements and the sizing graph), 7
# repetitions, 1 2 4 8 threads.
set -euo pipefail
graphs="${1:-17}"; batch="${2:-512}"; reps="${3:-7}"
shift $(( $# < 3 ? $# : 3 ))
threads=("$@")
[ "${#threads[@]}" -gt 0 ] || threads=(1 2 4 8 1)
. "$(dirname "$0")/stream_state/build.sh"
build_program graph_build/graph_build.c graph_build
./graph_build "$graphs" "$batch" "$reps" "${threads[@]}"
