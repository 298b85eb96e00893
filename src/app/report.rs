//! The one place that turns errors into messages and exit codes.
//!
//! Commands wrap the typed errors of engines and foundation modules in `anyhow` with
//! context naming the object. [`report`] walks the chain, finds the first error that
//! knows its diagnosis ([`Diagnose`], implemented by each module for its own errors), and
//! prints the chain with the hint. Anything that does not know its diagnosis is treated as
//! an internal bug and printed with its whole chain. The list below names every error
//! type that implements [`Diagnose`]; `tests/layering.rs` fails when one is missing.

use std::io::Write;

use crate::foundation::error::Diagnose;
use crate::foundation::exit;

/// Finds the diagnosis of an error chain: the first error in it that implements [`Diagnose`].
fn diagnosis(err: &anyhow::Error) -> Option<(u8, Option<String>)> {
    for cause in err.chain() {
        macro_rules! try_type {
            ($($t:ty),* $(,)?) => {
                $(if let Some(d) = cause.downcast_ref::<$t>() {
                    return Some((d.exit_code(), d.hint()));
                })*
            };
        }
        try_type!(
            crate::foundation::error::UserError,
            crate::engines::lockfile::LockfileError,
            crate::engines::fingerprint::FingerprintFileError,
            crate::foundation::process::ProcessError,
            crate::foundation::fsutil::WriteError,
            crate::foundation::fsutil::ReadError,
            crate::foundation::limits::LimitError,
            crate::engines::gpurun::TimingSettingError,
            crate::foundation::recipe::RecipeError,
            crate::foundation::store::StoreError,
            crate::engines::build::BuildError,
            crate::foundation::config::ConfigError,
            crate::foundation::nix::NixError,
            crate::foundation::git::GitError,
            crate::engines::bisect::history::HistoryError,
            crate::engines::bisect::run::BisectError,
            crate::engines::bisect::slurm::SlurmError,
            crate::engines::share::ShareError,
            crate::engines::bundle::BundleError,
            crate::foundation::archive::ArchiveError,
            crate::engines::toolchain::install::InstallError,
            crate::engines::bisect::toolchains::ToolchainBisectError,
            crate::engines::nvbench::NvbenchError,
            crate::engines::bench::GpuError,
            crate::engines::replay::ReplayError,
            crate::engines::profile::ProfileError,
            crate::engines::roofline::CalibrationError,
            crate::engines::toolchain::releases::PinError,
            crate::foundation::config::PinWriteError,
            crate::engines::init::InitError,
            crate::foundation::pyenv::PyEnvError,
            crate::foundation::error::Hinted,
            crate::engines::catalog::FindError,
            crate::engines::bench::MetricError,
            crate::engines::bench::ArityError,
            crate::foundation::runspec::ParamError,
            crate::engines::pyrun::PyRunError,
        );
    }
    None
}

/// Prints an error to stderr and returns the exit code it maps to.
pub fn report(err: &anyhow::Error) -> u8 {
    let style = crate::foundation::output::Style::for_stderr();
    report_to(&mut std::io::stderr().lock(), &style, err)
}

/// Writes an error's message (and its hint, or the note that it is a bug) to `out` and
/// returns the exit code it maps to.
fn report_to(
    out: &mut dyn Write,
    style: &crate::foundation::output::Style,
    err: &anyhow::Error,
) -> u8 {
    // Messages carry names from elsewhere (paths, commit subjects, record fields).
    let chain: Vec<String> = err
        .chain()
        .map(|c| crate::foundation::output::sanitize(&c.to_string()))
        .collect();
    let (code, hint) = match diagnosis(err) {
        Some(d) => d,
        None => {
            let _ = writeln!(out, "{} {}", style.error("error:"), chain.join(": "));
            let _ = writeln!(
                out,
                "{} this looks like a bug in repro; please report it with the message above",
                style.dim("note:")
            );
            return exit::INTERNAL;
        }
    };
    let _ = writeln!(out, "{} {}", style.error("error:"), chain.join(": "));
    if let Some(hint) = hint {
        let hint = crate::foundation::output::sanitize(&hint);
        let _ = writeln!(out, "{} {hint}", style.hint("hint:"));
    }
    code
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::foundation::error::UserError;

    /// The exit code and the text `report` gives `err`, without colour.
    fn reported(err: anyhow::Error) -> (u8, String) {
        let mut out = Vec::new();
        let code = report_to(
            &mut out,
            &crate::foundation::output::Style::for_stderr(),
            &err,
        );
        let text = String::from_utf8(out).unwrap();
        // Strip ANSI colour, which a terminal running the tests would get.
        let mut plain = String::new();
        let mut rest = text.as_str();
        while let Some(i) = rest.find('\x1b') {
            plain.push_str(&rest[..i]);
            rest = &rest[i..];
            rest = rest.find('m').map_or("", |j| &rest[j + 1..]);
        }
        plain.push_str(rest);
        (code, plain)
    }

    #[test]
    fn an_error_that_knows_its_diagnosis_gives_its_code_and_hint_under_context() {
        let err = anyhow::Error::new(
            UserError::with_code(exit::ENVIRONMENT, "no GPU here").hint("run it on a GPU machine"),
        )
        .context("cannot bench `saxpy`");
        assert_eq!(
            reported(err),
            (
                exit::ENVIRONMENT,
                "error: cannot bench `saxpy`: no GPU here\nhint: run it on a GPU machine\n".into()
            )
        );
        // A diagnosis without a hint prints the message alone.
        assert_eq!(
            reported(UserError::usage("bad flag").into()),
            (exit::USAGE, "error: bad flag\n".into())
        );
    }

    /// The typed errors of user input that commands used to re-wrap as
    /// `UserError::usage(e.to_string())` (issue #30): each now reaches the top as itself,
    /// so its exit code and hint are its own (a command's hint, where it has a better one,
    /// rides on [`Hinted`] without hiding the type), and the text is what it was.
    #[test]
    fn typed_input_errors_keep_their_type_code_and_hint() {
        use crate::engines::bench::{ArityError, Metric};
        use crate::engines::catalog::FindError;
        use crate::foundation::error::Hinted;
        let find = || FindError::None {
            noun: "result",
            prefix: "abcd".into(),
        };
        let err = anyhow::Error::new(find());
        assert!(
            err.downcast_ref::<FindError>().is_some(),
            "the type is kept"
        );
        assert_eq!(
            reported(err),
            (
                exit::USAGE,
                "error: no result with ID abcd\nhint: `repro log` lists results with their IDs\n"
                    .into()
            )
        );
        let err = anyhow::Error::new(Hinted::new(
            find(),
            "`repro log --kind bisection` lists recorded bisections",
        ));
        assert_eq!(
            reported(err),
            (
                exit::USAGE,
                "error: no result with ID abcd\nhint: `repro log --kind bisection` lists recorded bisections\n".into()
            )
        );
        let metric = Metric::parse("bogus").unwrap_err();
        let (code, text) = reported(anyhow::Error::new(metric));
        assert_eq!(code, exit::USAGE);
        assert!(text.starts_with("error: --metric `bogus`: expected time, json:PATH or regex:RE\nhint: for example --metric time"), "{text}");
        let arity = ArityError::Count {
            kernel: "k".into(),
            params: 2,
            args: 1,
        };
        assert_eq!(
            reported(anyhow::Error::new(arity)),
            (
                exit::USAGE,
                "error: kernel `k` takes 2 parameters but [run] args gives 1\nhint: make [run] args match the kernel's parameters, in order\n".into()
            )
        );
        let mut params = std::collections::BTreeMap::new();
        let param =
            crate::foundation::runspec::override_params(&mut params, &["n".into()]).unwrap_err();
        assert_eq!(
            reported(anyhow::Error::new(param)),
            (
                exit::USAGE,
                "error: --param `n`: expected NAME=VALUE\n".into()
            )
        );
        // A word where a number belongs is said to be one, with what a value may be.
        params.insert("n".into(), vec![crate::foundation::expr::Value::Int(1)]);
        let word = crate::foundation::runspec::override_params(&mut params, &["n=4,abc".into()])
            .unwrap_err();
        let (code, text) = reported(anyhow::Error::new(word));
        assert_eq!(code, exit::USAGE);
        assert!(text.starts_with("error: --param `n=4,abc`: `abc` is not a number\nhint: a value is a number or an expression"), "{text}");
        let mut params = std::collections::BTreeMap::new();
        params.insert("n".into(), vec![crate::foundation::expr::Value::Int(1)]);
        crate::foundation::runspec::override_params(&mut params, &["n=2**20,3*2**10".into()])
            .unwrap();
        assert_eq!(params["n"].len(), 2);
        // Commas inside a call's parentheses are the call's, not the sweep's.
        crate::foundation::runspec::override_params(
            &mut params,
            &["n=ceil_div(1000, 3), min(4, max(2, 1)),7".into()],
        )
        .unwrap();
        use crate::foundation::expr::Value::Int;
        assert_eq!(params["n"], [Int(334), Int(2), Int(7)]);
        // Unbalanced, the rest is one value, which the parser refuses.
        assert!(
            crate::foundation::runspec::override_params(
                &mut params,
                &["n=ceil_div(1000, 3".into()]
            )
            .is_err()
        );
    }

    #[test]
    fn an_error_deep_in_the_chain_is_found_past_others() {
        // A typed engine error under two layers of context.
        let err = anyhow::Error::new(crate::engines::share::ShareError::Unreachable {
            remote: "origin".into(),
            detail: "no such remote".into(),
        })
        .context("push failed")
        .context("repro push");
        let (code, text) = reported(err);
        assert_eq!(code, exit::ENVIRONMENT);
        assert!(
            text.starts_with(
                "error: repro push: push failed: cannot reach the remote `origin`: no such remote\nhint: name a remote"
            ),
            "{text}"
        );
    }

    #[test]
    fn a_program_that_cannot_be_found_or_runs_too_long_is_diagnosed_with_a_hint() {
        use crate::foundation::process::ProcessError;
        let (code, text) = reported(
            anyhow::Error::new(ProcessError::NotFound {
                program: "nvcc".into(),
            })
            .context("cannot build `k`"),
        );
        assert_eq!(code, exit::ENVIRONMENT);
        assert!(
            text.ends_with("\nhint: install `nvcc` or put it on the PATH\n"),
            "{text}"
        );
        let (code, text) = reported(
            crate::foundation::process::Cmd::new("sleep")
                .arg("5")
                .timeout(std::time::Duration::from_millis(50))
                .run()
                .unwrap_err()
                .into(),
        );
        assert_eq!(code, exit::MISMATCH, "{text}");
        assert!(
            text.contains("\nhint: raise the time limit if the command is expected to be slow\n"),
            "{text}"
        );
    }

    #[test]
    fn an_error_nobody_diagnosed_is_reported_as_a_bug_with_its_whole_chain() {
        let err = anyhow::anyhow!("index out of range").context("while sorting steps");
        assert_eq!(
            reported(err),
            (
                exit::INTERNAL,
                "error: while sorting steps: index out of range\nnote: this looks like a bug in repro; please report it with the message above\n"
                    .into()
            )
        );
    }
}
