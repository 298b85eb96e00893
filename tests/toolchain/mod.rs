//! `repro toolchain`: installing, pinning and collecting NVIDIA toolchains from wheels.

mod cli;
mod coverage;
