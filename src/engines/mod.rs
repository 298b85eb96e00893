//! The use cases: each engine does one job (fingerprint, check, build, bench, bisect,
//! replay, bundle, share, toolchains) over the foundation's plumbing. Engines never import
//! the app layer.

pub mod abi;
pub mod bench;
pub mod bisect;
pub mod build;
pub mod bundle;
pub mod catalog;
pub mod check;
pub mod demo;
pub mod export;
pub mod fingerprint;
pub mod gpurun;
pub mod init;
pub mod lockfile;
pub mod nvbench;
pub mod profile;
pub mod pyrun;
pub mod replay;
pub mod roofline;
pub mod share;
pub mod toolchain;
