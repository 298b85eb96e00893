# Sourced by benches/gpu_stream_state.sh and benches/gpu_level_spread.sh: builds
# stream_state/kernel.cu for this GPU and the C program SOURCE (a path under benches/) into a
# temporary folder, removed at exit, and enters it. Uses CUDA_HOME (default /usr/local/cuda).
#   build_program SOURCE NAME
benches_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_program() {
  local cuda="${CUDA_HOME:-/usr/local/cuda}"
  local here="$benches_dir"
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  local arch
  arch="sm_$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)"
  "$cuda/bin/nvcc" -cubin -arch="$arch" -O3 -o "$work/kernel.cubin" "$here/stream_state/kernel.cu"
  gcc -O2 -o "$work/$2" "$here/$1" -I"$cuda/include" -I"$here/stream_state" \
    -L"$cuda/lib64/stubs" -lcuda -lpthread
  cd "$work"
}
