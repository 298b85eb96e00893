//! `repro bisect`: over generated and real histories, its report and step table, and on a
//! real one-node Slurm cluster (`--executor slurm`, `--detach`).

mod cli;
mod cluster;
mod real;
mod report;
mod steps;
