//! The Nix probe: flake files, the flake.lock digest and locked nixpkgs, the Nix shell,
//! and (separately, because it starts a process) `nix --version`.

use std::path::Path;

use sha2::{Digest, Sha256};

use super::host::TOOL_TIMEOUT;
use crate::foundation::fields::{Field, Fields};
use crate::foundation::process::{Cmd, ProcessError};
use crate::foundation::version::version_token;

/// Probes `flake.nix` and `flake.lock` at the project root.
pub fn probe(root: &Path) -> Fields {
    let mut f = Fields::new();
    let flake = root.join("flake.nix").is_file();
    f.insert("nix.flake".into(), Field::Value(flake.to_string()));
    f.insert(
        "nix.in-shell".into(),
        Field::Value(std::env::var("IN_NIX_SHELL").unwrap_or_else(|_| "no".into())),
    );
    // Bounded and regular only: the repository supplies it.
    let lock = crate::foundation::fsutil::read_bounded(&root.join("flake.lock"), 16 << 20);
    f.insert(
        "nix.flake-lock".into(),
        Field::Value(lock.is_ok().to_string()),
    );
    match lock {
        Ok(bytes) => {
            f.insert(
                "nix.flake-lock-digest".into(),
                Field::Value(hex::encode(Sha256::digest(&bytes))),
            );
            let (rev, nar) = locked_nixpkgs(&bytes);
            f.insert("nix.nixpkgs-rev".into(), rev);
            f.insert("nix.nixpkgs-nar-hash".into(), nar);
        }
        Err(_) => {
            let why = Field::Unavailable("no flake.lock".into());
            for k in [
                "nix.flake-lock-digest",
                "nix.nixpkgs-rev",
                "nix.nixpkgs-nar-hash",
            ] {
                f.insert(k.into(), why.clone());
            }
        }
    }
    f
}

/// The nixpkgs input's locked `rev` and `narHash` from a flake.lock.
fn locked_nixpkgs(bytes: &[u8]) -> (Field, Field) {
    let missing = |why: &str| {
        (
            Field::Unavailable(why.into()),
            Field::Unavailable(why.into()),
        )
    };
    let Ok(json) = serde_json::from_slice::<serde_json::Value>(bytes) else {
        return missing("flake.lock is not valid JSON");
    };
    let root = json["root"].as_str().unwrap_or("root");
    // The root's `nixpkgs` input names the node; it is usually, but not always, "nixpkgs".
    let node = json["nodes"][root]["inputs"]["nixpkgs"]
        .as_str()
        .unwrap_or("nixpkgs");
    let locked = &json["nodes"][node]["locked"];
    if locked.is_null() {
        return missing("flake.lock has no nixpkgs input");
    }
    let get = |k: &str| {
        locked[k].as_str().map_or_else(
            || Field::Unavailable(format!("no locked {k}")),
            |s| Field::Value(s.into()),
        )
    };
    (get("rev"), get("narHash"))
}

/// Runs `nix --version`.
pub fn probe_version() -> Fields {
    let v = match Cmd::new("nix").arg("--version").timeout(TOOL_TIMEOUT).run() {
        Ok(out) => version_token(&out.stdout_str()).map_or_else(
            || Field::Unavailable("no version in `nix --version`".into()),
            Field::Value,
        ),
        Err(ProcessError::NotFound { .. }) => Field::Unavailable("nix is not installed".into()),
        Err(e) => Field::Unavailable(e.to_string().lines().next().unwrap_or_default().into()),
    };
    [("nix.version".to_string(), v)].into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_locked_nixpkgs_through_the_root_inputs() {
        let lock = br#"{"nodes":{"root":{"inputs":{"nixpkgs":"nixpkgs_2"}},
            "nixpkgs_2":{"locked":{"rev":"abc","narHash":"sha256-x"}}},"root":"root","version":7}"#;
        let (rev, nar) = locked_nixpkgs(lock);
        assert_eq!(rev, Field::Value("abc".into()));
        assert_eq!(nar, Field::Value("sha256-x".into()));
        assert!(matches!(locked_nixpkgs(b"{").0, Field::Unavailable(_)));
    }

    #[test]
    fn no_flake_is_recorded_not_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let f = probe(dir.path());
        assert_eq!(f["nix.flake"], Field::Value("false".into()));
        assert!(matches!(f["nix.flake-lock-digest"], Field::Unavailable(_)));
    }
}
