//! `repro env` (capture, check, lock, why-import), on real and fake drivers, the shell
//! integration and Nix dev shells.

mod cli;
mod coverage;
mod fakegpu;
mod nix;
mod shell;
