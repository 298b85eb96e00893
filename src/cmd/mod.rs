//! One module per subcommand, each with its clap `Args` and one `run` function.

pub mod bench;
pub mod bisect;
pub mod build;
pub mod bundle;
pub mod demo;
pub mod env;
pub mod plot;
pub mod pull;
pub mod push;
pub mod replay;
pub mod results;
pub mod shell;
pub mod store;
pub mod toolchain;
