//! `repro push [REMOTE]`: send the store's records to a git remote (refs/repro/…).

use crate::app::context::Globals;

/// Arguments of `repro push`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// A remote of this repository, or a URL.
    #[arg(default_value = "origin", value_parser = crate::app::context::non_empty())]
    remote: String,
}

/// Runs `repro push`.
pub fn run(g: &Globals, a: Args) -> anyhow::Result<u8> {
    super::pull::share(g, &a.remote, true)
}
