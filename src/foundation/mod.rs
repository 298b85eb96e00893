//! The plumbing every engine uses: exit codes and the error trait, output, fields, git,
//! the store, child processes, file writes, archives, configuration, recipes, run specs,
//! ELF and fat binary readers,
//! expressions, statistics, plots, keys, spans and versions. Foundation modules import
//! only each other, never an engine or the app.

pub mod archive;
pub mod config;
pub mod cubin;
pub mod cuda_options;
pub mod diagnostics;
pub mod driverlib;
pub mod elf;
pub mod error;
pub mod exit;
pub mod expr;
pub mod fatbin;
pub mod fields;
pub mod fingerprint;
pub mod fsutil;
pub mod fswatch;
pub mod git;
pub mod keys;
pub mod limits;
pub mod nix;
pub mod occupancy;
pub mod output;
pub mod plot;
pub mod process;
pub mod pyenv;
pub mod recipe;
pub mod records;
pub mod roofline;
pub mod runspec;
pub mod scratch;
pub mod solib;
pub mod spans;
pub mod stamp;
pub mod stats;
pub mod store;
pub mod symbols;
pub mod toolchain_spec;
pub mod version;
