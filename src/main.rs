//! The `repro` binary: parse arguments, run, report the error, return the exit code.

use std::process::ExitCode;

fn main() -> ExitCode {
    repro::main()
}
