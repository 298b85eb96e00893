//! Comparing dotted version strings (`580.159.04`, `13.0`, `12.2.0-14+deb12u1`).

use std::cmp::Ordering;

/// Compares two versions component by component: digits numerically, anything else as
/// text, a missing component as zero (`13.0` equals `13.0.0`, precedes `13.0.88`).
pub fn compare(a: &str, b: &str) -> Ordering {
    let split = |s: &str| -> Vec<String> {
        s.split(|c: char| !c.is_ascii_alphanumeric())
            .filter(|p| !p.is_empty())
            .map(str::to_string)
            .collect()
    };
    let (pa, pb) = (split(a), split(b));
    for i in 0..pa.len().max(pb.len()) {
        let x = pa.get(i).map_or("0", String::as_str);
        let y = pb.get(i).map_or("0", String::as_str);
        let ord = match (x.parse::<u64>(), y.parse::<u64>()) {
            (Ok(x), Ok(y)) => x.cmp(&y),
            _ => x.cmp(y),
        };
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
    use std::cmp::Ordering::*;

    #[test]
    fn orders_numerically() {
        assert_eq!(compare("580.159.04", "580.95.05"), Greater);
        assert_eq!(compare("13.0", "13.0.0"), Equal);
        assert_eq!(compare("13.0", "13.0.88"), Less);
        assert_eq!(compare("9.0", "10.0"), Less);
        assert_eq!(compare("1.95.0", "1.95.0"), Equal);
    }
}
