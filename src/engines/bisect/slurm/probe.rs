//! The probe job: before the first step, one small job on a node of the partition the
//! steps will use checks that the node sees the repository, the store, the bisection's
//! scratch directory and the repro binary at the paths this machine sends, that the
//! store's lock works there (NFS, Lustre) and that the scratch directory can be written.
//! Its shell checks the paths (so a missing binary is named too), then `repro
//! bisect-probe` checks the rest; each failure is one line `repro-probe: WHAT PATH: WHY`.

use std::path::PathBuf;

/// What the probe found wrong, read from its output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Finding {
    /// Every check passed.
    Ok,
    /// The node does not see a path (or cannot open or write it).
    Path {
        /// What it is: `repository`, `store`, `scratch directory`, `repro binary`, `lock`,
        /// `write`.
        what: String,
        /// The path.
        path: PathBuf,
        /// Why, when the node said.
        why: Option<String>,
    },
    /// The probe said nothing this reads (it did not run to its end).
    Silent,
}

/// The shell script of the probe job: `sh -c SCRIPT sh REPRO STORE DIR REPO WHAT=PATH...`.
pub const SCRIPT: &str = r#"r=$1 s=$2 d=$3 g=$4; shift 4
echo "repro-probe: node ${SLURMD_NODENAME:-$(hostname)}"
for a; do
  w=${a%%=*}; p=${a#*=}
  if [ ! -e "$p" ]; then echo "repro-probe: missing $w $p"; exit 3; fi
done
exec "$r" --store "$s" bisect-probe "$g" "$d"
"#;

/// The node's name, from the probe's first line.
pub fn node(stdout: &str) -> Option<String> {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("repro-probe: node "))
        .map(|n| n.trim().to_string())
}

/// Reads the probe's output.
pub fn finding(stdout: &str) -> Finding {
    for l in stdout.lines() {
        let Some(rest) = l.strip_prefix("repro-probe: ") else {
            continue;
        };
        if rest == "ok" {
            return Finding::Ok;
        }
        if let Some(m) = rest.strip_prefix("missing ") {
            // `WHAT PATH`: the names of what are fixed words, some of two.
            for what in ["scratch directory", "repro binary", "repository", "store"] {
                if let Some(p) = m.strip_prefix(what).and_then(|p| p.strip_prefix(' ')) {
                    return Finding::Path {
                        what: what.into(),
                        path: PathBuf::from(p),
                        why: None,
                    };
                }
            }
        }
        for what in ["repository", "lock", "write"] {
            if let Some(m) = rest.strip_prefix(what).and_then(|m| m.strip_prefix(' ')) {
                let (path, why) = m.split_once(": ").unwrap_or((m, ""));
                return Finding::Path {
                    what: what.into(),
                    path: PathBuf::from(path),
                    why: (!why.is_empty()).then(|| why.to_string()),
                };
            }
        }
    }
    Finding::Silent
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probes_lines_name_what_failed() {
        assert_eq!(
            finding("repro-probe: node n1\nrepro-probe: ok\n"),
            Finding::Ok
        );
        assert_eq!(
            node("repro-probe: node n1\nrepro-probe: ok\n").as_deref(),
            Some("n1")
        );
        assert_eq!(
            finding("repro-probe: node n1\nrepro-probe: missing repro binary /opt/my repro/bin\n"),
            Finding::Path {
                what: "repro binary".into(),
                path: "/opt/my repro/bin".into(),
                why: None
            }
        );
        assert_eq!(
            finding(
                "repro-probe: lock /s/lock: could not write /s/lock: Function not implemented; hint: x\n"
            ),
            Finding::Path {
                what: "lock".into(),
                path: "/s/lock".into(),
                why: Some("could not write /s/lock: Function not implemented; hint: x".into())
            }
        );
        assert_eq!(finding("srun: error: something\n"), Finding::Silent);
        assert_eq!(
            finding("repro-probe: missing nothing-known /x\n"),
            Finding::Silent
        );
    }
}
