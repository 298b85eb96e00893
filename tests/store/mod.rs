//! The store: `repro store`, concurrent writers, and its trust rules.

mod cli;
mod concurrency;
mod trust;
