//! `repro replay`: records and bundles replayed exactly.

mod cli;
mod coverage;
