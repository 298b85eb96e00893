//! `repro`: reproducible GPU-kernel work.
//!
//! The crate is laid out one module per concern: the command line (`cli`, `cmd`), machine
//! fingerprints (`fingerprint`, `fields`), lockfiles and their comparison (`lockfile`,
//! `check`), CUDA toolchains (`toolchain`), and the shared plumbing every command uses:
//! child processes (`process`), atomic writes (`fsutil`), errors and exit codes (`error`,
//! `exit`) and terminal output (`output`).

pub mod archive;
pub mod bench;
pub mod bisect;
pub mod build;
pub mod bundle;
pub mod catalog;
pub mod check;
pub mod cli;
pub mod cmd;
pub mod config;
pub mod driverlib;
pub mod error;
pub mod exit;
pub mod export;
pub mod expr;
pub mod fields;
pub mod fingerprint;
pub mod fsutil;
pub mod gpurun;
pub mod keys;
pub mod lockfile;
pub mod nix;
pub mod nvbench;
pub mod output;
pub mod plot;
pub mod process;
pub mod recipe;
pub mod records;
pub mod runspec;
pub mod share;
pub mod spans;
pub mod stats;
pub mod store;
pub mod symbols;
pub mod toolchain;
pub mod version;
