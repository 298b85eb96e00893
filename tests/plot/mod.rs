//! `repro plot`: SVG and text plots of results across commits.

mod cli;
mod coverage;
