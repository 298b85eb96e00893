//! `repro`: reproducible GPU-kernel work.
//!
//! Three layers, imports only downward (see ARCHITECTURE.md): `app` (the command line,
//! one file per subcommand, error reporting), `engines` (the use cases) and `foundation`
//! (the plumbing every engine uses).

pub mod app;
pub mod engines;
pub mod foundation;

pub use app as cli;
pub use engines::{bench, bundle, gpurun, lockfile, toolchain};
pub use foundation::{archive, exit, expr, fields, fsutil, keys, recipe, store};
