//! `repro bench`: the command bench, recipe benches (sweeps, checks, exports), and the
//! bench engine on the fake GPU driver.

mod cli;
mod coverage;
mod fakegpu;
mod ondevice;
mod recipe;
