//! The integration tests: one binary (`cargo test --test integration`), a module per
//! feature, as ripgrep lays its tests out. `common` holds the set-ups every feature shares
//! (the binary with a clean environment, throwaway repositories, provisioned toolchains);
//! `fakegpu` the fake NVIDIA driver. Run one feature with a filter:
//! `cargo test --test integration bisect::`. A new test file must be declared here:
//! `layering::every_test_file_is_compiled` fails otherwise (autotests are off in Cargo.toml).

mod common;
mod fakegpu;

mod bench;
mod bisect;
mod build;
mod bundle;
mod demo_cli;
mod env;
mod fuzz_parsers;
mod hostile_input;
mod init_cli;
mod json_keys;
mod layering;
mod plot;
mod profile_cli;
mod progress_cli;
mod readme;
mod replay;
mod results;
mod share;
mod store;
mod toolchain;
mod torch_bench_cli;
mod torch_cli;
mod trust_exec;
