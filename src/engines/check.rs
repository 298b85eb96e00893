//! Comparing a fingerprint with a lockfile: a pure function over plain data.
//!
//! Each rule of the lockfile is evaluated against the field's actual values (one per GPU
//! for per-device fields) and gives one row: its status, what was expected, what was
//! found, and for anything that is not a match, a concrete hint.

use crate::engines::fingerprint::Field;
use crate::foundation::fields::{self, Kind};
use crate::foundation::version;

/// A lockfile's policy for one field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Policy {
    /// The value must be exactly this.
    Exact(String),
    /// The value must be a version at least this.
    Min(String),
    /// The value must be one of these.
    OneOf(Vec<String>),
    /// The value should be this; a difference is reported but never fatal.
    Warn(String),
    /// The field is not checked (the value, if given, is informational).
    Ignore(Option<String>),
}

impl Policy {
    /// The policy's name as written in lockfiles.
    pub fn name(&self) -> &'static str {
        match self {
            Policy::Exact(_) => "exact",
            Policy::Min(_) => "min",
            Policy::OneOf(_) => "one-of",
            Policy::Warn(_) => "warn",
            Policy::Ignore(_) => "ignore",
        }
    }

    /// What the policy expects, for display.
    pub fn expected(&self) -> String {
        match self {
            Policy::Exact(v) | Policy::Warn(v) => v.clone(),
            Policy::Min(v) => format!(">= {v}"),
            Policy::OneOf(vs) => format!("one of {}", vs.join(", ")),
            Policy::Ignore(v) => v.clone().unwrap_or_default(),
        }
    }

    /// Whether one actual value satisfies the policy (ignore is always satisfied).
    pub fn accepts(&self, kind: Kind, actual: &str) -> bool {
        let same = |v: &str| match kind {
            Kind::Number => match (v.parse::<f64>(), actual.parse::<f64>()) {
                (Ok(a), Ok(b)) => a == b,
                _ => v == actual,
            },
            _ => v == actual,
        };
        match self {
            Policy::Exact(v) | Policy::Warn(v) => same(v),
            Policy::Min(v) => version::is_version(actual) && version::compare(actual, v).is_ge(),
            Policy::OneOf(vs) => vs.iter().any(|v| same(v)),
            Policy::Ignore(_) => true,
        }
    }
}

/// One rule of a lockfile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// The lockfile key (`gpu.name`, `env.CUDA_HOME`).
    pub key: String,
    /// Its policy.
    pub policy: Policy,
}

/// The outcome for one rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    /// Every value satisfies the policy.
    Ok,
    /// Not checked.
    Ignored,
    /// A `warn` field differs or is unavailable.
    Warn,
    /// A checked field is unavailable on this machine.
    Missing,
    /// A checked field has a value the policy rejects.
    Mismatch,
}

impl Status {
    /// Whether this status fails `env check` (without `--strict`).
    pub fn is_fatal(self) -> bool {
        matches!(self, Status::Missing | Status::Mismatch)
    }
}

/// One row of the report.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Row {
    /// The lockfile key.
    pub field: String,
    /// The policy's name.
    pub policy: &'static str,
    /// The outcome.
    pub status: Status,
    /// What the lockfile expects.
    pub expected: String,
    /// What was found (devices joined with `; ` when they differ).
    pub actual: String,
    /// What to do about it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

/// The whole comparison.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Report {
    /// One row per rule, in lockfile order.
    pub rows: Vec<Row>,
}

/// How many rows of a check have each status (`env check --json`'s `counts`). Fields are
/// in the order of their JSON keys, so the JSON written is the same as before it was a type.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Counts {
    /// Rows whose policy is `ignore`.
    pub ignored: usize,
    /// Rows whose value differs where it must match.
    pub mismatch: usize,
    /// Rows whose field this machine cannot report.
    pub missing: usize,
    /// Rows that match.
    pub ok: usize,
    /// Rows that differ where a difference is only a warning.
    pub warn: usize,
}

impl Report {
    /// How many rows have each status.
    pub fn counts(&self) -> Counts {
        Counts {
            ignored: self.count(Status::Ignored),
            mismatch: self.count(Status::Mismatch),
            missing: self.count(Status::Missing),
            ok: self.count(Status::Ok),
            warn: self.count(Status::Warn),
        }
    }
    /// How many rows have this status.
    pub fn count(&self, s: Status) -> usize {
        self.rows.iter().filter(|r| r.status == s).count()
    }
    /// Whether the check passes: no fatal row, and with `strict` no warning either.
    pub fn passes(&self, strict: bool) -> bool {
        !self
            .rows
            .iter()
            .any(|r| r.status.is_fatal() || (strict && r.status == Status::Warn))
    }
}

/// Evaluates every rule against the actual values that `actual(key)` returns.
pub fn check(rules: &[Rule], actual: impl Fn(&str) -> Vec<Field>) -> Report {
    let rows = rules
        .iter()
        .map(|rule| {
            let values = actual(&rule.key);
            let status = evaluate(&rule.policy, fields::kind_of(&rule.key), &values);
            let hint = match status {
                Status::Ok | Status::Ignored => None,
                _ => Some(
                    python_hint(&rule.key, &rule.policy, &values, &actual)
                        .unwrap_or_else(|| hint(&rule.key, &rule.policy, &values)),
                ),
            };
            Row {
                field: rule.key.clone(),
                policy: rule.policy.name(),
                status,
                expected: rule.policy.expected(),
                actual: describe(&values),
                hint,
            }
        })
        .collect();
    Report { rows }
}

/// The status of one rule given the field's values.
pub fn evaluate(policy: &Policy, kind: Kind, values: &[Field]) -> Status {
    if matches!(policy, Policy::Ignore(_)) {
        return Status::Ignored;
    }
    let all_ok = !values.is_empty()
        && values
            .iter()
            .all(|v| matches!(v, Field::Value(x) if policy.accepts(kind, x)));
    if all_ok {
        Status::Ok
    } else if matches!(policy, Policy::Warn(_)) {
        Status::Warn
    } else if values.iter().any(|v| matches!(v, Field::Unavailable(_))) || values.is_empty() {
        Status::Missing
    } else {
        Status::Mismatch
    }
}

/// Values for display: one value if every device agrees, else each with its index.
fn describe(values: &[Field]) -> String {
    let text = |f: &Field| match f {
        Field::Value(v) => v.clone(),
        Field::Unavailable(r) => format!("unavailable: {r}"),
    };
    match values {
        [] => "unavailable".into(),
        [one] => text(one),
        many if many.iter().all(|v| v == &many[0]) => text(&many[0]),
        many => many
            .iter()
            .enumerate()
            .map(|(i, v)| format!("gpu {i}: {}", text(v)))
            .collect::<Vec<_>>()
            .join("; "),
    }
}

/// The CUDA version each driver branch first supports, newest first: (CUDA, minimum driver).
const CUDA_DRIVER_MINIMUMS: &[(&str, &str)] = &[
    ("13.0", "580"),
    ("12.9", "575"),
    ("12.8", "570"),
    ("12.6", "560"),
    ("12.5", "555"),
    ("12.4", "550"),
    ("12.3", "545"),
    ("12.2", "535"),
    ("12.0", "525"),
];

fn first_value(values: &[Field]) -> Option<&str> {
    values.iter().find_map(Field::value)
}

/// A concrete suggestion for a row that is not a match.
pub fn hint(key: &str, policy: &Policy, values: &[Field]) -> String {
    let actual = first_value(values);
    let relax = "if the difference is acceptable, relax this field's policy in the lockfile";
    match key {
        "gpu.name" | "gpu.compute-capability" => {
            "this lockfile is for a different GPU: choose the lockfile for this machine with \
             --lock, or write one with `repro env lock --name NAME`"
                .into()
        }
        "gpu.count" => "check CUDA_VISIBLE_DEVICES, or rent an instance with the locked number of GPUs".into(),
        "driver.version" | "driver.cuda-version" if actual.is_none() => {
            "no NVIDIA driver is loaded: install the driver on the host (it never comes from Nix), \
             or run on a GPU machine"
                .into()
        }
        "driver.version" => {
            let want = locked_value(policy).unwrap_or_default();
            let older = actual.is_some_and(|a| version::compare(a, &want).is_lt());
            if older {
                format!("the driver is older than the lockfile's {want}: upgrade the host driver (it never comes from Nix)")
            } else {
                format!("the driver differs from the lockfile's {want}; {relax} (for example policy = \"min\")")
            }
        }
        "driver.cuda-version" => {
            let want = locked_value(policy).unwrap_or_default();
            let needed = CUDA_DRIVER_MINIMUMS
                .iter()
                .find(|(cuda, _)| version::compare(&want, cuda).is_ge())
                .map(|(cuda, drv)| format!(" (CUDA {cuda} needs driver branch R{drv} or newer)"))
                .unwrap_or_default();
            format!(
                "the driver supports CUDA {} but the lock needs {want}: upgrade the host driver{needed}",
                actual.unwrap_or("?")
            )
        }
        "toolchain.nvrtc.version" if actual.is_none() => {
            "NVRTC not found: run `repro toolchain install`, or set REPRO_NVRTC or CUDA_HOME".into()
        }
        "toolchain.nvrtc.version" => {
            "a different NVRTC was found: run `repro toolchain install` for the pinned one, or point \
             REPRO_NVRTC at it (`repro env capture` shows which library was used and why)"
                .into()
        }
        "toolchain.nvcc.version" if actual.is_none() => {
            "nvcc not found: enter the pinned shell with `nix develop`, put the CUDA toolkit's bin on \
             the PATH, or set this field to policy = \"ignore\" if you build only with NVRTC"
                .into()
        }
        "toolchain.nvcc.version" => "a different nvcc is on the PATH: use the pinned shell (`nix develop`) or set REPRO_NVCC".into(),
        "nix.flake-lock-digest" if actual.is_none() => "no flake.lock at the project root: restore it from git".into(),
        "nix.flake-lock-digest" => {
            "flake.lock differs from the locked one: see `git diff -- flake.lock`; if the update is \
             intended, re-run `repro env lock --force`"
                .into()
        }
        "repo.dirty" => "commit or stash your changes: results from a dirty tree cannot be replayed".into(),
        "gpu.persistence-mode" if actual == Some("false") => {
            "persistence mode is off: first launches are slower and clocks may reset; enable with \
             `nvidia-smi -pm 1` (needs root)"
                .into()
        }
        "gpu.persistence-mode" => "persistence mode differs from the lockfile; `nvidia-smi -pm 0|1` switches it (needs root)".into(),
        "gpu.ecc" => "ECC differs: it changes usable memory and bandwidth; `nvidia-smi -e` switches it (reboot needed)".into(),
        "gpu.mig-mode" => "MIG differs: a MIG slice is not the whole GPU; `nvidia-smi -mig 0|1` switches it".into(),
        "gpu.power-limit-w" | "gpu.max-sm-clock-mhz" | "gpu.max-mem-clock-mhz" => {
            "the power or clock limits differ: timings are not comparable; see `nvidia-smi -q -d POWER,CLOCK`".into()
        }
        k if k.starts_with("env.") && actual.is_none() => format!("set {} as the lockfile expects", &k[4..]),
        k if k.starts_with("env.") => format!("{} differs: export it as the lockfile expects", &k[4..]),
        _ if actual.is_none() => format!("this machine cannot report it; {relax}"),
        _ => format!("this machine differs from the lockfile; {relax}"),
    }
}

/// The hint for a Python field: the pip command that installs the locked version of a
/// distribution into this environment (with its interpreter, from `python.interpreter`).
fn python_hint(
    key: &str,
    policy: &Policy,
    values: &[Field],
    actual: &dyn Fn(&str) -> Vec<Field>,
) -> Option<String> {
    let dist = match key {
        "python.torch.version" => "torch",
        "python.numpy.version" => "numpy",
        "python.triton.version" => "triton",
        k => fields::dist_name(k)?,
    };
    let want = locked_value(policy)?;
    let py = actual("python.interpreter")
        .first()
        .and_then(|f| f.value().map(str::to_string))
        .unwrap_or_else(|| "python3".into());
    let now = match first_value(values) {
        Some(v) => format!("{dist} {v} is installed"),
        None => format!("{dist} is not installed"),
    };
    Some(format!(
        "{now}, the lockfile has {want}: run `{}`",
        crate::foundation::pyenv::pip_install_command(&py, dist, &want)
    ))
}

fn locked_value(policy: &Policy) -> Option<String> {
    match policy {
        Policy::Exact(v) | Policy::Min(v) | Policy::Warn(v) => Some(v.clone()),
        Policy::OneOf(vs) => vs.iter().min_by(|a, b| version::compare(a, b)).cloned(),
        Policy::Ignore(v) => v.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn v(s: &str) -> Field {
        Field::Value(s.into())
    }

    #[test]
    fn examples() {
        let rules = vec![
            Rule {
                key: "gpu.name".into(),
                policy: Policy::Exact("NVIDIA H200".into()),
            },
            Rule {
                key: "driver.version".into(),
                policy: Policy::Min("580.95.05".into()),
            },
            Rule {
                key: "gpu.ecc".into(),
                policy: Policy::Warn("true".into()),
            },
            Rule {
                key: "host.cpu".into(),
                policy: Policy::Ignore(None),
            },
            Rule {
                key: "toolchain.nvrtc.version".into(),
                policy: Policy::OneOf(vec!["13.0".into(), "13.1".into()]),
            },
        ];
        let report = check(&rules, |k| match k {
            "gpu.name" => vec![v("NVIDIA H200"), v("NVIDIA H100")],
            "driver.version" => vec![v("580.159.04")],
            "gpu.ecc" => vec![v("false")],
            "toolchain.nvrtc.version" => vec![Field::Unavailable("NVRTC not found".into())],
            _ => vec![v("x")],
        });
        let st: Vec<Status> = report.rows.iter().map(|r| r.status).collect();
        assert_eq!(
            st,
            [
                Status::Mismatch,
                Status::Ok,
                Status::Warn,
                Status::Ignored,
                Status::Missing
            ]
        );
        assert_eq!(
            report.rows[0].actual,
            "gpu 0: NVIDIA H200; gpu 1: NVIDIA H100"
        );
        assert!(
            report.rows[4]
                .hint
                .as_deref()
                .unwrap()
                .contains("repro toolchain install")
        );
        assert!(!report.passes(false));
    }

    #[test]
    fn policies_name_themselves_and_what_they_expect() {
        let table = [
            (Policy::Exact("13.0".into()), "exact", "13.0"),
            (Policy::Min("580".into()), "min", ">= 580"),
            (
                Policy::OneOf(vec!["a".into(), "b".into()]),
                "one-of",
                "one of a, b",
            ),
            (Policy::Warn("true".into()), "warn", "true"),
            (Policy::Ignore(Some("x".into())), "ignore", "x"),
            (Policy::Ignore(None), "ignore", ""),
        ];
        for (p, name, expected) in table {
            assert_eq!(p.name(), name, "{p:?}");
            assert_eq!(p.expected(), expected, "{p:?}");
        }
        // The row carries both, and the report counts by status.
        let rules = [
            Rule {
                key: "gpu.count".into(),
                policy: Policy::Min("2".into()),
            },
            Rule {
                key: "gpu.ecc".into(),
                policy: Policy::Warn("true".into()),
            },
            Rule {
                key: "env.A".into(),
                policy: Policy::Exact("1".into()),
            },
        ];
        let report = check(&rules, |k| match k {
            "gpu.count" => vec![v("1")],
            "gpu.ecc" => vec![v("false")],
            _ => vec![v("1")],
        });
        assert_eq!(report.rows[0].policy, "min");
        assert_eq!(report.rows[0].expected, ">= 2");
        assert_eq!(report.rows[0].status, Status::Mismatch);
        assert_eq!(report.count(Status::Mismatch), 1);
        assert_eq!(report.count(Status::Warn), 1);
        assert_eq!(report.count(Status::Ok), 1);
        assert_eq!(report.count(Status::Missing), 0);
        assert!(!report.passes(false));
        // A warning alone fails only a strict check.
        let warn_only = check(&rules[1..], |k| match k {
            "gpu.ecc" => vec![v("false")],
            _ => vec![v("1")],
        });
        assert!(warn_only.passes(false));
        assert!(!warn_only.passes(true));
    }

    #[test]
    fn status_is_fatal_only_when_missing_or_mismatched() {
        assert!(!Status::Ok.is_fatal());
        assert!(!Status::Ignored.is_fatal());
        assert!(!Status::Warn.is_fatal());
        assert!(Status::Missing.is_fatal());
        assert!(Status::Mismatch.is_fatal());
    }

    #[test]
    fn values_are_described_once_when_every_device_agrees() {
        let gone = Field::Unavailable("no driver".into());
        assert_eq!(describe(&[]), "unavailable");
        assert_eq!(
            describe(std::slice::from_ref(&gone)),
            "unavailable: no driver"
        );
        assert_eq!(describe(&[v("a"), v("a")]), "a");
        assert_eq!(
            describe(&[v("a"), gone]),
            "gpu 0: a; gpu 1: unavailable: no driver"
        );
    }

    #[test]
    fn every_field_with_a_remedy_gets_its_own_hint() {
        let none: &[Field] = &[Field::Unavailable("gone".into())];
        let exact = |s: &str| Policy::Exact(s.into());
        // (key, policy, values, a phrase only that hint has)
        let table: Vec<(&str, Policy, Vec<Field>, &str)> = vec![
            (
                "gpu.name",
                exact("H200"),
                vec![v("H100")],
                "for a different GPU",
            ),
            (
                "gpu.compute-capability",
                exact("9.0"),
                vec![v("8.0")],
                "for a different GPU",
            ),
            (
                "gpu.count",
                exact("8"),
                vec![v("1")],
                "CUDA_VISIBLE_DEVICES",
            ),
            (
                "driver.version",
                exact("580"),
                none.to_vec(),
                "no NVIDIA driver is loaded",
            ),
            (
                "driver.cuda-version",
                exact("13.0"),
                none.to_vec(),
                "no NVIDIA driver is loaded",
            ),
            (
                "driver.version",
                exact("580.95.05"),
                vec![v("570.1")],
                "older than the lockfile's 580.95.05",
            ),
            (
                "driver.version",
                exact("580.95.05"),
                vec![v("590.1")],
                "differs from the lockfile's 580.95.05",
            ),
            (
                "driver.cuda-version",
                Policy::Min("12.4".into()),
                vec![v("12.2")],
                "supports CUDA 12.2 but the lock needs 12.4: upgrade the host driver (CUDA 12.4 needs driver branch R550",
            ),
            (
                "driver.cuda-version",
                exact("11.8"),
                vec![v("11.0")],
                "needs 11.8: upgrade the host driver",
            ),
            (
                "toolchain.nvrtc.version",
                exact("13.0"),
                none.to_vec(),
                "NVRTC not found",
            ),
            (
                "toolchain.nvrtc.version",
                exact("13.0"),
                vec![v("12.8")],
                "a different NVRTC was found",
            ),
            (
                "toolchain.nvcc.version",
                exact("13.0"),
                none.to_vec(),
                "nvcc not found",
            ),
            (
                "toolchain.nvcc.version",
                exact("13.0"),
                vec![v("12.8")],
                "a different nvcc is on the PATH",
            ),
            (
                "nix.flake-lock-digest",
                exact("ab"),
                none.to_vec(),
                "no flake.lock at the project root",
            ),
            (
                "nix.flake-lock-digest",
                exact("ab"),
                vec![v("cd")],
                "flake.lock differs",
            ),
            (
                "repo.dirty",
                exact("false"),
                vec![v("true")],
                "commit or stash your changes",
            ),
            (
                "gpu.persistence-mode",
                exact("true"),
                vec![v("false")],
                "persistence mode is off",
            ),
            (
                "gpu.persistence-mode",
                exact("false"),
                vec![v("true")],
                "persistence mode differs",
            ),
            ("gpu.ecc", exact("true"), vec![v("false")], "ECC differs"),
            (
                "gpu.mig-mode",
                exact("false"),
                vec![v("true")],
                "MIG differs",
            ),
            (
                "gpu.power-limit-w",
                exact("700"),
                vec![v("600")],
                "power or clock limits differ",
            ),
            (
                "gpu.max-sm-clock-mhz",
                exact("1980"),
                vec![v("1755")],
                "power or clock limits differ",
            ),
            (
                "gpu.max-mem-clock-mhz",
                exact("2619"),
                vec![v("1593")],
                "power or clock limits differ",
            ),
            (
                "env.CUDA_HOME",
                exact("/usr/local/cuda"),
                none.to_vec(),
                "set CUDA_HOME as the lockfile expects",
            ),
            (
                "env.CUDA_HOME",
                exact("/usr/local/cuda"),
                vec![v("/opt/cuda")],
                "CUDA_HOME differs: export it",
            ),
            (
                "host.cpu",
                exact("EPYC"),
                none.to_vec(),
                "this machine cannot report it; if the difference",
            ),
            (
                "host.cpu",
                exact("EPYC"),
                vec![v("Xeon")],
                "this machine differs from the lockfile; if the difference",
            ),
        ];
        for (key, policy, values, phrase) in table {
            let h = hint(key, &policy, &values);
            assert!(h.contains(phrase), "{key} {policy:?} {values:?}: {h}");
        }
    }

    #[test]
    fn the_locked_value_of_a_list_is_its_oldest_version() {
        assert_eq!(
            locked_value(&Policy::OneOf(vec![
                "13.0".into(),
                "12.8".into(),
                "12.10".into()
            ])),
            Some("12.8".into())
        );
        assert_eq!(
            locked_value(&Policy::Min("12.4".into())),
            Some("12.4".into())
        );
        assert_eq!(locked_value(&Policy::Warn("1".into())), Some("1".into()));
        assert_eq!(locked_value(&Policy::Ignore(None)), None);
        assert_eq!(
            locked_value(&Policy::Ignore(Some("2".into()))),
            Some("2".into())
        );
        // The hint for a list names the oldest acceptable branch.
        let h = hint(
            "driver.cuda-version",
            &Policy::OneOf(vec!["13.0".into(), "12.8".into()]),
            &[v("12.2")],
        );
        assert!(h.contains("needs 12.8") && h.contains("R570"), "{h}");
    }

    #[test]
    fn cuda_hint_names_the_driver_branch() {
        let h = hint(
            "driver.cuda-version",
            &Policy::Exact("13.0".into()),
            &[v("12.4")],
        );
        assert!(h.contains("R580"), "{h}");
    }

    #[test]
    fn numbers_compare_numerically() {
        assert!(Policy::Exact("700".into()).accepts(Kind::Number, "700.0"));
        assert!(!Policy::Exact("700".into()).accepts(Kind::Text, "700.0"));
    }

    // The oracle: the rules of the book (docs/src/reference/lockfile.md), written as plainly as possible.
    fn oracle(policy: &Policy, kind: Kind, values: &[Field]) -> Status {
        if let Policy::Ignore(_) = policy {
            return Status::Ignored;
        }
        let mut any_unavailable = values.is_empty();
        let mut any_rejected = false;
        for value in values {
            match value {
                Field::Unavailable(_) => any_unavailable = true,
                Field::Value(x) => {
                    let ok = match policy {
                        Policy::Exact(e) | Policy::Warn(e) => {
                            if kind == Kind::Number {
                                e.parse::<f64>().ok() == x.parse::<f64>().ok()
                                    && (e.parse::<f64>().is_ok() || e == x)
                            } else {
                                e == x
                            }
                        }
                        Policy::Min(m) => {
                            x.chars().next().is_some_and(|c| c.is_ascii_digit())
                                && version::compare(x, m) != std::cmp::Ordering::Less
                        }
                        Policy::OneOf(list) => list.iter().any(|e| {
                            if kind == Kind::Number {
                                e.parse::<f64>().ok() == x.parse::<f64>().ok()
                                    && (e.parse::<f64>().is_ok() || e == x)
                            } else {
                                e == x
                            }
                        }),
                        Policy::Ignore(_) => unreachable!(),
                    };
                    any_rejected |= !ok;
                }
            }
        }
        match (any_unavailable, any_rejected, policy) {
            (false, false, _) => Status::Ok,
            (_, _, Policy::Warn(_)) => Status::Warn,
            (true, _, _) => Status::Missing,
            (false, true, _) => Status::Mismatch,
        }
    }

    fn value_strategy() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("13.0".to_string()),
            Just("13.0.0".to_string()),
            Just("12.8".to_string()),
            Just("580.159.04".to_string()),
            Just("580.95.05".to_string()),
            Just("132".to_string()),
            Just("132.0".to_string()),
            Just("true".to_string()),
            Just("NVIDIA H200".to_string()),
            "[0-9]{1,3}(\\.[0-9]{1,3}){0,2}",
        ]
    }

    fn policy_strategy() -> impl Strategy<Value = Policy> {
        prop_oneof![
            value_strategy().prop_map(Policy::Exact),
            value_strategy().prop_map(Policy::Min),
            prop::collection::vec(value_strategy(), 1..4).prop_map(Policy::OneOf),
            value_strategy().prop_map(Policy::Warn),
            prop::option::of(value_strategy()).prop_map(Policy::Ignore),
        ]
    }

    fn field_strategy() -> impl Strategy<Value = Field> {
        prop_oneof![
            4 => value_strategy().prop_map(Field::Value),
            1 => Just(Field::Unavailable("gone".into())),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]
        #[test]
        fn evaluate_matches_the_oracle(
            policy in policy_strategy(),
            kind in prop_oneof![Just(Kind::Text), Just(Kind::Version), Just(Kind::Number), Just(Kind::Bool)],
            values in prop::collection::vec(field_strategy(), 0..4),
        ) {
            prop_assert_eq!(evaluate(&policy, kind, &values), oracle(&policy, kind, &values));
        }

        #[test]
        fn report_passes_iff_no_fatal_row(
            rules in prop::collection::vec((policy_strategy(), field_strategy()), 0..8),
            strict in any::<bool>(),
        ) {
            let rs: Vec<Rule> = rules.iter().enumerate()
                .map(|(i, (p, _))| Rule { key: format!("env.V{i}"), policy: p.clone() }).collect();
            let report = check(&rs, |k| {
                let i: usize = k[5..].parse().unwrap();
                vec![rules[i].1.clone()]
            });
            let statuses: Vec<Status> = rules.iter().map(|(p, f)| oracle(p, Kind::Text, std::slice::from_ref(f))).collect();
            let expect = !statuses.iter().any(|s| matches!(s, Status::Missing | Status::Mismatch) || (strict && *s == Status::Warn));
            prop_assert_eq!(report.passes(strict), expect);
            // Every non-matching row carries a hint; matching and ignored rows carry none.
            for row in &report.rows {
                prop_assert_eq!(row.hint.is_some(), !matches!(row.status, Status::Ok | Status::Ignored));
            }
        }
    }
}
