//! `repro build`: NVRTC, nvcc and command builds, keys and their identity, honest failures,
//! resource reports and budgets, and recipe errors.

mod cli;
mod coverage;
mod hits;
mod honest;
mod identity;
mod recipe_errors;
mod resources;
