//! `repro push` and `repro pull`: sharing stores.

mod cli;
mod coverage;
