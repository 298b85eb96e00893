//! Bisection: find the first commit whose build breaks, whose check fails, or whose
//! benchmark got slower, without touching the user's working tree.

pub mod checkout;
pub mod decide;
pub mod executor;
pub mod history;
pub mod local;
pub mod run;
pub mod search;
pub mod slurm;
pub mod toolchains;
