//! Comparing version strings (`580.159.04`, `13.0`, `12.2.0-14+deb12u1`, `1:2.0~rc1`).

use std::cmp::Ordering;

/// Compares two versions the way Debian orders package versions, with one difference:
/// `[epoch:]upstream[-revision]`, the epoch numerically first (none is 0), then the
/// upstream part, then the revision (after the last `-`). Each part is compared component
/// by component, components being split at anything not a letter or a digit and where
/// letters meet digits (`1ubuntu1` is 1, `ubuntu`, 1): digits numerically, letters as text
/// and after numbers, and `~` before anything, even the end (`2.0~rc1` precedes `2.0`).
/// Unlike Debian, a missing component counts as zero (`13.0` equals `13.0.0`, precedes
/// `13.0.88`), which is how driver and CUDA versions are written.
pub fn compare(a: &str, b: &str) -> Ordering {
    let (ea, ua, ra) = parts(a);
    let (eb, ub, rb) = parts(b);
    ea.cmp(&eb)
        .then_with(|| compare_part(ua, ub))
        .then_with(|| compare_part(ra, rb))
}

/// `[epoch:]upstream[-revision]`: the epoch only where all digits before the first `:`.
fn parts(v: &str) -> (u64, &str, &str) {
    let (epoch, rest) = match v.split_once(':') {
        Some((e, rest)) if !e.is_empty() && e.bytes().all(|c| c.is_ascii_digit()) => {
            (e.parse().unwrap_or(u64::MAX), rest)
        }
        _ => (0, v),
    };
    match rest.rsplit_once('-') {
        Some((upstream, revision)) => (epoch, upstream, revision),
        None => (epoch, rest, ""),
    }
}

/// One component of a version part.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
enum Component<'a> {
    /// `~`: before everything, including the end.
    Tilde,
    /// Digits (a missing component is `Number(0)`).
    Number(u64),
    /// Letters.
    Word(&'a str),
}

fn components(s: &str) -> Vec<Component<'_>> {
    let mut out = Vec::new();
    let bytes = s.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        let run = |pred: fn(u8) -> bool| {
            bytes[i..]
                .iter()
                .position(|&b| !pred(b))
                .map_or(bytes.len(), |n| i + n)
        };
        if c == b'~' {
            out.push(Component::Tilde);
            i += 1;
        } else if c.is_ascii_digit() {
            let end = run(|b| b.is_ascii_digit());
            out.push(Component::Number(s[i..end].parse().unwrap_or(u64::MAX)));
            i = end;
        } else if c.is_ascii_alphabetic() {
            let end = run(|b| b.is_ascii_alphabetic());
            out.push(Component::Word(&s[i..end]));
            i = end;
        } else {
            i += 1;
        }
    }
    out
}

fn compare_part(a: &str, b: &str) -> Ordering {
    let (ca, cb) = (components(a), components(b));
    for i in 0..ca.len().max(cb.len()) {
        let x = ca.get(i).unwrap_or(&Component::Number(0));
        let y = cb.get(i).unwrap_or(&Component::Number(0));
        let ord = x.cmp(y);
        if ord != Ordering::Equal {
            return ord;
        }
    }
    Ordering::Equal
}

/// Whether `s` looks like a version or number that [`compare`] orders meaningfully.
pub fn is_version(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_digit())
}

/// Extracts the first version-looking token (`12.2.0`, `1.95.0`) from a line of text.
pub fn version_token(text: &str) -> Option<String> {
    text.split(|c: char| c.is_whitespace() || c == '(' || c == ')' || c == ',')
        .map(|t| t.trim_start_matches('V').trim_start_matches('v'))
        .find(|t| {
            t.starts_with(|c: char| c.is_ascii_digit())
                && t.contains('.')
                && t.split('.')
                    .next()
                    .is_some_and(|p| p.chars().all(|c| c.is_ascii_digit()))
        })
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_token_finds_the_first_dotted_number() {
        let t = |s: &str| version_token(s);
        assert_eq!(t("Python 3.11.7").as_deref(), Some("3.11.7"));
        assert_eq!(t("no version here"), None);
        assert_eq!(t(""), None);
        // Each separator alone splits: a space, a tab, each parenthesis, a comma.
        assert_eq!(t("nix\t2.8.0").as_deref(), Some("2.8.0"));
        assert_eq!(t("gcc(12.2.0").as_deref(), Some("12.2.0"));
        assert_eq!(t("12.2.0)x").as_deref(), Some("12.2.0"));
        assert_eq!(t("release,13.0,V13.0.88").as_deref(), Some("13.0"));
        // A leading v or V is not part of the version.
        assert_eq!(t("V13.0.88").as_deref(), Some("13.0.88"));
        assert_eq!(t("tool v1.2").as_deref(), Some("1.2"));
        // Not a version: no digit first, no dot, or a first part that is not a number.
        assert_eq!(t("x1.2 2.3").as_deref(), Some("2.3"));
        assert_eq!(t("12 13.1").as_deref(), Some("13.1"));
        assert_eq!(t("1x.2 3.4").as_deref(), Some("3.4"));
        assert_eq!(t("x.1 y.2"), None);
    }
    use std::cmp::Ordering::*;

    #[test]
    fn orders_numerically() {
        assert_eq!(compare("580.159.04", "580.95.05"), Greater);
        assert_eq!(compare("13.0", "13.0.0"), Equal);
        assert_eq!(compare("13.0", "13.0.88"), Less);
        assert_eq!(compare("9.0", "10.0"), Less);
        assert_eq!(compare("1.95.0", "1.95.0"), Equal);
    }

    /// Debian-style versions: revisions, epochs, `~` pre-releases, zero-padded driver
    /// components, and separators other than dots.
    #[test]
    fn orders_debian_style_versions() {
        let ordered = [
            "1.2.2",
            "1.2.3~rc1",
            "1.2.3~rc2",
            "1.2.3",
            "1.2.3-1",
            "1.2.3-1ubuntu1",
            "1.2.3-1ubuntu2",
            "1.2.3-2",
            "1.2.3-10",
            "1.2.3.1",
            "1.2.4",
            "1:0.1",
            "1:2.0",
            "2:0.0",
        ];
        for (i, a) in ordered.iter().enumerate() {
            for (j, b) in ordered.iter().enumerate() {
                assert_eq!(compare(a, b), i.cmp(&j), "{a} vs {b}");
            }
        }
        assert_eq!(compare("535.104.05", "535.104.5"), Equal);
        assert_eq!(compare("535.104.05", "535.86.10"), Greater);
        assert_eq!(compare("535.104.05", "550.54.14"), Less);
        assert_eq!(compare("12.2.0-14+deb12u1", "12.2.0-9"), Greater);
        assert_eq!(compare("12.2.0-14+deb12u1", "12.2.0-14"), Greater);
        assert_eq!(compare("12.2.0-14+deb12u1", "12.2.0-14+deb12u2"), Less);
        assert_eq!(compare("6.1.0-18-amd64", "6.1.0-9-amd64"), Greater);
        assert_eq!(compare("2.0~~", "2.0~"), Less);
        assert_eq!(compare("1:2.0", "3.0"), Greater);
        assert_eq!(compare("a:1", "1"), Greater, "not an epoch: a word");
        assert_eq!(compare("a:1", "b:1"), Less, "not epochs: words");
        assert_eq!(compare(":1", "1"), Equal, "an empty epoch is none");
        assert_eq!(compare("13.0", "13"), Equal);
    }

    #[test]
    fn versions_start_with_a_digit() {
        assert!(is_version("13.0"));
        assert!(is_version("1:2.0"));
        assert!(!is_version("v13"));
        assert!(!is_version(""));
    }
}
