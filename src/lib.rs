//! `repro`: reproducible GPU-kernel work.
//!
//! Three layers, imports only downward (see ARCHITECTURE.md): `app` (the command line,
//! one file per subcommand, error reporting), `engines` (the use cases) and `foundation`
//! (the plumbing every engine uses). All three are private to the crate.
//!
//! The library surface is deliberate and small: [`main`], which the `repro` binary runs,
//! and the modules the integration tests and fuzzers in `tests/` drive directly (the
//! parsers of files from elsewhere, the archive format, keys, the store and the exit
//! codes), re-exported here under their short names. Nothing else is public.

mod app;
mod engines;
mod foundation;

pub use app::main;

/// The command line as clap parses it (`tests/readme.rs` parses every example), and as
/// users see it: [`cli::command`] adds each command's exit codes to its help. [`cli::Internal`]
/// holds the commands repro runs as its own children.
pub mod cli {
    pub use crate::app::{Cli, Internal, command};
}

pub use engines::{bench, bundle, gpurun, lockfile, toolchain};
pub use foundation::{
    archive, elf, exit, expr, fatbin, fields, fsutil, keys, recipe, records, scratch, store,
};
