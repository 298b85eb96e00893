//! One module per subcommand, each with its clap `Args` and one `run` function.

pub mod env;
