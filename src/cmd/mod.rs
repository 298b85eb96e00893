//! One module per subcommand, each with its clap `Args` and one `run` function.

pub mod build;
pub mod env;
pub mod store;
pub mod toolchain;
