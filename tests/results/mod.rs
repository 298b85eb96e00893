//! `repro log`, `show` and `compare`: reading results.

mod cli;
mod log;
