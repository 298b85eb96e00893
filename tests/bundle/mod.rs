//! `repro bundle` and what comes back in: bundles made and extracted, and hostile bundles
//! and stores.

mod cli;
mod coverage;
mod hostile;
