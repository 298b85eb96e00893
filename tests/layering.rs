//! The crate's shape: three layers with imports flowing one way, and no import cycle.
//!
//! Every file under `src/` is read as text; every path it names into the crate (`use
//! crate::…`, `use super::…`, `crate::a::b` in code, a child module's `child::item`) is
//! resolved to the module file it lands in. Then:
//!
//! 1. Layers: `app` may use `engines` and `foundation`, `engines` may use `foundation`,
//!    `foundation` uses only itself. `lib.rs` and `main.rs` sit on top.
//! 2. No cycle between the modules of one layer (`engines::bisect`, `foundation::store`: a
//!    module with its submodules counts as one).
//! 3. No cycle between the files of one module either; a file may use the items of the
//!    module it is declared in (its parent), as Rust code does with `super::`.
//! 4. Every error type that implements `Diagnose` is listed in `app/report.rs`, the one
//!    place that maps errors to exit codes.
//!
//! The same analysis prints the graph: `cargo test --test integration layering:: -- --nocapture`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Module = Vec<String>;

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file under `dir` with its module path (`src/engines/bisect/run.rs` is
/// `engines::bisect::run`; `mod.rs`, `lib.rs` and `main.rs` name their directory).
fn modules(dir: &Path) -> BTreeMap<Module, PathBuf> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<Module, PathBuf>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().flatten().collect();
        entries.sort_by_key(|e| e.path());
        for e in entries {
            let p = e.path();
            if p.is_dir() {
                walk(root, &p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let rel = p.strip_prefix(root).unwrap().with_extension("");
                let mut m: Module = rel
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect();
                if matches!(m.last().map(String::as_str), Some("mod" | "lib" | "main")) {
                    m.pop();
                }
                out.insert(m, p);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// The text with comments, string and character literals blanked out (same length, so
/// positions stay meaningful).
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    let blank = |out: &mut Vec<u8>, s: &[u8]| {
        out.extend(s.iter().map(|&c| if c == b'\n' { c } else { b' ' }))
    };
    while i < b.len() {
        let rest = &b[i..];
        if rest.starts_with(b"//") {
            let end = rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len());
            blank(&mut out, &rest[..end]);
            i += end;
        } else if rest.starts_with(b"/*") {
            let (mut depth, mut j) = (0usize, 0);
            loop {
                if rest[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if rest[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&mut out, &rest[..j]);
            i += j;
        } else if (rest.starts_with(b"r#") || rest.starts_with(b"r\"") || rest.starts_with(b"br"))
            && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_'))
            && {
                let s = if rest[0] == b'b' { &rest[1..] } else { rest };
                s.len() > 1 && s[0] == b'r' && (s[1] == b'"' || s[1] == b'#')
            }
        {
            let start = if rest[0] == b'b' { 2 } else { 1 };
            let hashes = rest[start..].iter().take_while(|&&c| c == b'#').count();
            let mut close = vec![b'"'];
            close.extend(std::iter::repeat_n(b'#', hashes));
            let body = start + hashes + 1;
            let end = rest[body..]
                .windows(close.len())
                .position(|w| w == close.as_slice())
                .map_or(rest.len(), |p| body + p + close.len());
            blank(&mut out, &rest[..end]);
            i += end;
        } else if rest[0] == b'"' {
            let mut j = 1;
            while j < rest.len() && rest[j] != b'"' {
                j += if rest[j] == b'\\' { 2 } else { 1 };
            }
            blank(&mut out, &rest[..(j + 1).min(rest.len())]);
            i += j + 1;
        } else if rest[0] == b'\'' {
            // A character literal ('a', '\n', '\''), or a lifetime ('a), kept.
            let len = if rest.get(1) == Some(&b'\\') {
                rest[2..].iter().position(|&c| c == b'\'').map(|p| p + 3)
            } else {
                let ch = std::str::from_utf8(&rest[1..rest.len().min(5)])
                    .ok()
                    .or_else(|| std::str::from_utf8(&rest[1..rest.len().min(4)]).ok())
                    .or_else(|| std::str::from_utf8(&rest[1..rest.len().min(3)]).ok())
                    .or_else(|| std::str::from_utf8(&rest[1..rest.len().min(2)]).ok())
                    .and_then(|s| s.chars().next())
                    .map_or(1, char::len_utf8);
                (rest.get(1 + ch) == Some(&b'\'')).then_some(ch + 2)
            };
            match len {
                Some(n) => {
                    blank(&mut out, &rest[..n]);
                    i += n;
                }
                None => {
                    out.push(b'\'');
                    i += 1;
                }
            }
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}

/// A token of the stripped text: an identifier, `::`, or one punctuation byte.
fn tokens(code: &str) -> Vec<&str> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_alphanumeric() || c == b'_' {
            let s = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push(&code[s..i]);
        } else if code[i..].starts_with("::") {
            out.push("::");
            i += 2;
        } else if c.is_ascii_whitespace() {
            i += 1;
        } else {
            out.push(&code[i..i + 1]);
            i += 1;
        }
    }
    out
}

/// The paths (as segments) a file names into the crate, each made absolute.
fn paths_named(file_mod: &Module, text: &str, all: &BTreeMap<Module, PathBuf>) -> Vec<Module> {
    let code = code_only(text);
    let t = tokens(&code);
    let mut out = Vec::new();
    // The module each token is in: the file's, plus inline `mod name { … }` blocks.
    let mut stack: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let here = |stack: &[(String, usize)]| -> Module {
        let mut m = file_mod.clone();
        m.extend(stack.iter().map(|(n, _)| n.clone()));
        m
    };
    // Reads a path starting at token i: idents joined by `::`, and, in a `use`, the
    // braced tree that may follow. Returns the paths and the index after them.
    fn read_tree(
        t: &[&str],
        mut i: usize,
        prefix: Module,
        in_use: bool,
        out: &mut Vec<Module>,
    ) -> usize {
        let mut p = prefix;
        loop {
            match t.get(i) {
                Some(&"{") if in_use => {
                    i += 1;
                    loop {
                        match t.get(i) {
                            Some(&"}") => return i + 1,
                            Some(&",") => i += 1,
                            None => return i,
                            _ => i = read_tree(t, i, p.clone(), true, out),
                        }
                    }
                }
                Some(&"*") if in_use => {
                    out.push(p);
                    return i + 1;
                }
                Some(s)
                    if s.chars()
                        .next()
                        .is_some_and(|c| c.is_alphabetic() || c == '_') =>
                {
                    p.push(s.to_string());
                    i += 1;
                    if t.get(i) == Some(&"::") {
                        i += 1;
                        continue;
                    }
                    if in_use && t.get(i) == Some(&"as") {
                        i += 2;
                    }
                    out.push(p);
                    return i;
                }
                _ => {
                    out.push(p);
                    return i;
                }
            }
        }
    }
    let mut i = 0;
    while i < t.len() {
        let tok = t[i];
        match tok {
            "{" => depth += 1,
            "}" => {
                depth = depth.saturating_sub(1);
                if stack.last().is_some_and(|(_, d)| *d == depth) {
                    stack.pop();
                }
            }
            "mod" if t.get(i + 2) == Some(&"{") => {
                stack.push((t[i + 1].to_string(), depth));
                depth += 1;
                i += 3;
                continue;
            }
            _ => {}
        }
        let prev_is_path = i > 0 && t[i - 1] == "::";
        let in_use = i > 0 && t[i - 1] == "use";
        if !prev_is_path
            && (tok == "crate" || tok == "super" || tok == "self")
            && t.get(i + 1) == Some(&"::")
        {
            let me = here(&stack);
            let mut base: Module = match tok {
                "crate" => Vec::new(),
                _ => me.clone(),
            };
            let mut j = i;
            if tok != "crate" {
                while t.get(j) == Some(&"super") || t.get(j) == Some(&"self") {
                    if t[j] == "super" {
                        base.pop();
                    }
                    j += 2; // the keyword and its `::`
                }
                j -= 1; // read_tree starts at the first segment after `::`
            }
            let start = if tok == "crate" { i + 2 } else { j + 1 };
            let mut found = Vec::new();
            i = read_tree(&t, start, base, in_use, &mut found);
            out.extend(found);
            continue;
        }
        if !prev_is_path && t.get(i + 1) == Some(&"::") {
            // `child::item` for a child module of the module the code is in.
            let mut child = here(&stack);
            child.push(tok.to_string());
            if all.contains_key(&child) {
                let mut found = Vec::new();
                i = read_tree(&t, i + 2, child, in_use, &mut found);
                out.extend(found);
                continue;
            }
        }
        i += 1;
    }
    out
}

/// The module file a path lands in: its longest prefix that is a module.
fn resolve(path: &Module, all: &BTreeMap<Module, PathBuf>) -> Option<Module> {
    (0..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|m| all.contains_key(m))
}

/// The crate's import graph: module file -> the module files it uses.
fn graph(dir: &Path) -> BTreeMap<Module, BTreeSet<Module>> {
    let all = modules(dir);
    let mut g = BTreeMap::new();
    for (m, p) in &all {
        let text = std::fs::read_to_string(p).unwrap();
        let deps: BTreeSet<Module> = paths_named(m, &text, &all)
            .iter()
            .filter_map(|q| resolve(q, &all))
            .filter(|d| d != m && !d.is_empty())
            .collect();
        g.insert(m.clone(), deps);
    }
    g
}

fn name(m: &Module) -> String {
    if m.is_empty() {
        "crate".into()
    } else {
        m.join("::")
    }
}

/// 3 app, 2 engines, 1 foundation; lib.rs and main.rs 4; anything else 0 (an error).
fn layer(m: &Module) -> u8 {
    match m.first().map(String::as_str) {
        None => 4,
        Some("app") => 3,
        Some("engines") => 2,
        Some("foundation") => 1,
        Some(_) => 0,
    }
}

/// The strongly connected components with more than one node (Tarjan).
fn cycles(g: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<Vec<Module>> {
    struct S<'a> {
        g: &'a BTreeMap<Module, BTreeSet<Module>>,
        index: BTreeMap<&'a Module, usize>,
        low: BTreeMap<&'a Module, usize>,
        stack: Vec<&'a Module>,
        on: BTreeSet<&'a Module>,
        out: Vec<Vec<Module>>,
    }
    fn visit<'a>(s: &mut S<'a>, v: &'a Module) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on.insert(v);
        for w in s.g.get(v).into_iter().flatten() {
            let Some((w, _)) = s.g.get_key_value(w) else {
                continue;
            };
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.on.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            loop {
                let w = s.stack.pop().unwrap();
                s.on.remove(w);
                comp.push(w.clone());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                s.out.push(comp);
            }
        }
    }
    let mut s = S {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in g.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.out
}

/// Everything wrong with the shape of the crate under `dir`, one line each.
fn problems(dir: &Path) -> Vec<String> {
    let g = graph(dir);
    let mut out = Vec::new();
    for m in g.keys() {
        if layer(m) == 0 {
            out.push(format!(
                "{} is in no layer (put it under app/, engines/ or foundation/)",
                name(m)
            ));
        }
    }
    // 1. Layers.
    for (a, deps) in &g {
        for b in deps {
            if layer(b) > layer(a) {
                out.push(format!("upward import: {} uses {}", name(a), name(b)));
            }
        }
    }
    // 2. Cycles between the modules of a layer (a module with its submodules is one).
    let unit = |m: &Module| -> Module { m.iter().take(2).cloned().collect() };
    let mut units: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (a, deps) in &g {
        let ua = unit(a);
        units.entry(ua.clone()).or_default();
        for b in deps {
            let ub = unit(b);
            if ub != ua && layer(&ub) == layer(&ua) {
                units.entry(ua.clone()).or_default().insert(ub);
            }
        }
    }
    for c in cycles(&units) {
        out.push(format!(
            "import cycle between modules: {}",
            c.iter().map(name).collect::<Vec<_>>().join(", ")
        ));
    }
    // 3. Cycles between the files of one module; a file may use its ancestors' items.
    let mut files: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (a, deps) in &g {
        let kept = deps
            .iter()
            .filter(|b| unit(b) == unit(a) && !a.starts_with(b))
            .cloned()
            .collect();
        files.insert(a.clone(), kept);
    }
    for c in cycles(&files) {
        out.push(format!(
            "import cycle between files: {}",
            c.iter().map(name).collect::<Vec<_>>().join(", ")
        ));
    }
    out
}

#[test]
fn imports_flow_down_the_layers_without_cycles() {
    let dir = src_dir();
    let g = graph(&dir);
    let edges: usize = g.values().map(BTreeSet::len).sum();
    println!("{} modules, {edges} imports between them", g.len());
    for (a, deps) in &g {
        println!(
            "{} -> {}",
            name(a),
            deps.iter().map(name).collect::<Vec<_>>().join(", ")
        );
    }
    let found = problems(&dir);
    assert!(
        found.is_empty(),
        "the crate's layering is broken:\n{}",
        found.join("\n")
    );
}

#[test]
fn every_diagnosed_error_is_mapped_in_the_report() {
    let dir = src_dir();
    let report = std::fs::read_to_string(dir.join("app/report.rs")).unwrap();
    let mut missing = Vec::new();
    for p in modules(&dir).values() {
        let code = code_only(&std::fs::read_to_string(p).unwrap());
        let t = tokens(&code);
        for (i, w) in t.windows(3).enumerate() {
            if w[0] == "Diagnose" && w[1] == "for" {
                // The type's last path segment: `for crate::x::E {` or `for E {`.
                let mut j = i + 2;
                while t.get(j + 1) == Some(&"::") {
                    j += 2;
                }
                let ty = t[j];
                if !report.contains(&format!("::{ty},")) && !report.contains(&format!("    {ty},"))
                {
                    missing.push(format!("{ty} ({})", p.display()));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "errors that implement Diagnose but app/report.rs does not list: {missing:?}"
    );
}

/// Where `engines` or `foundation` code (tests included) uses anyhow or returns
/// `Result<_, String>`, one line each. Those layers return typed errors (thiserror, with
/// data); anyhow belongs to the command layer (`app`).
fn error_style_faults(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for (m, p) in modules(dir) {
        if !matches!(
            m.first().map(String::as_str),
            Some("engines" | "foundation")
        ) {
            continue;
        }
        let code = code_only(&std::fs::read_to_string(&p).unwrap());
        let t = tokens(&code);
        if t.contains(&"anyhow") {
            out.push(format!("{} uses anyhow", name(&m)));
        }
        for (i, _) in t.iter().enumerate().filter(|(_, w)| **w == "Result") {
            if t.get(i + 1) != Some(&"<") {
                continue;
            }
            // The last argument at the outermost level of `Result<…>`: its error type.
            let (mut depth, mut last_comma, mut j) = (0usize, None, i + 1);
            while j < t.len() {
                match t[j] {
                    "-" if t.get(j + 1) == Some(&">") => j += 1, // `->` in a fn type
                    "<" => depth += 1,
                    ">" => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    "," if depth == 1 => last_comma = Some(j),
                    _ => {}
                }
                j += 1;
            }
            if let Some(c) = last_comma
                && t[c + 1..j] == ["String"]
            {
                out.push(format!(
                    "{} returns Result<_, String>: {}",
                    name(&m),
                    t[i..=j.min(t.len() - 1)].join("")
                ));
            }
        }
    }
    out
}

#[test]
fn engines_and_foundation_use_one_error_style() {
    let found = error_style_faults(&src_dir());
    assert!(
        found.is_empty(),
        "engines and foundation return typed errors (thiserror) and leave anyhow to app:\n{}",
        found.join("\n")
    );
}

/// The checker itself: a tree with each kind of fault is caught, a clean one passes.
#[test]
fn the_checker_finds_each_kind_of_fault() {
    let tmp = std::env::temp_dir().join(format!("repro-layering-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let write = |rel: &str, text: &str| {
        let p = tmp.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    let clean = [
        (
            "lib.rs",
            "pub mod app; pub mod engines; pub mod foundation;",
        ),
        (
            "app/mod.rs",
            "pub mod cmd;\nuse crate::engines::bisect::run;\nfn f() { cmd::go(); }",
        ),
        (
            "app/cmd.rs",
            "use crate::{engines::bisect, foundation::store::Store};\npub fn go() {}",
        ),
        ("engines/mod.rs", "pub mod bisect;"),
        (
            "engines/bisect/mod.rs",
            "pub mod run;\npub mod search;\npub struct Step;",
        ),
        (
            "engines/bisect/run.rs",
            "use super::search::Next;\nuse super::Step;\nfn f() { let s = \"crate::app::x\"; } // crate::app",
        ),
        (
            "engines/bisect/search.rs",
            "pub struct Next;\n#[cfg(test)]\nmod tests {\n    use super::*;\n}",
        ),
        ("foundation/mod.rs", "pub mod store;\npub mod git;"),
        (
            "foundation/store.rs",
            "pub struct Store; fn f() { crate::foundation::git::x(); }",
        ),
        ("foundation/git.rs", "pub fn x() {}"),
    ];
    for (rel, text) in clean {
        write(rel, text);
    }
    assert_eq!(problems(&tmp), Vec::<String>::new());
    let faults = [
        (
            "foundation/git.rs",
            "use crate::app::cmd;",
            "upward import: foundation::git uses app::cmd",
        ),
        (
            "foundation/git.rs",
            "fn f() { crate::engines::bisect::run::g(); }",
            "upward import: foundation::git uses engines::bisect::run",
        ),
        (
            "foundation/git.rs",
            "use crate::{foundation::store, engines::bisect};",
            "upward import: foundation::git uses engines::bisect",
        ),
        (
            "foundation/git.rs",
            "use crate::foundation::store::Store;",
            "import cycle between modules: foundation::git, foundation::store",
        ),
        (
            "engines/bisect/search.rs",
            "use super::run::X;",
            "import cycle between files: engines::bisect::run, engines::bisect::search",
        ),
        ("util.rs", "", "util is in no layer"),
    ];
    for (rel, text, want) in faults {
        let before = std::fs::read_to_string(tmp.join(rel)).ok();
        write(
            rel,
            &format!("{}\n{text}\n", before.clone().unwrap_or_default()),
        );
        let found = problems(&tmp);
        assert!(
            found.iter().any(|p| p.contains(want)),
            "{want:?} not found in {found:?}"
        );
        match before {
            Some(b) => write(rel, &b),
            None => std::fs::remove_file(tmp.join(rel)).unwrap(),
        }
    }
    assert_eq!(error_style_faults(&tmp), Vec::<String>::new());
    let style_faults = [
        (
            "engines/bisect/run.rs",
            "fn f() -> Result<Vec<u8>, String> { todo!() }",
            "engines::bisect::run returns Result<_, String>",
        ),
        (
            "foundation/store.rs",
            "fn g(x: Box<dyn Fn() -> u8>) -> std::result::Result<(), String> { todo!() }",
            "foundation::store returns Result<_, String>",
        ),
        (
            "foundation/git.rs",
            "fn h() -> anyhow::Result<()> { Ok(()) }",
            "foundation::git uses anyhow",
        ),
    ];
    for (rel, text, want) in style_faults {
        let before = std::fs::read_to_string(tmp.join(rel)).unwrap();
        write(rel, &format!("{before}\n{text}\n"));
        let found = error_style_faults(&tmp);
        assert!(
            found.iter().any(|p| p.contains(want)),
            "{want:?} not found in {found:?}"
        );
        write(rel, &before);
    }
    // Typed errors, and anyhow in the command layer, are fine.
    write(
        "app/cmd.rs",
        "fn f() -> anyhow::Result<()> { Ok(()) }\nfn g() -> Result<String, E> { todo!() }",
    );
    assert_eq!(error_style_faults(&tmp), Vec::<String>::new());
    let _ = std::fs::remove_dir_all(&tmp);
}

/// Autotests are off (Cargo.toml): every integration test is a module of the one binary
/// `tests/tests.rs` declares. A file under `tests/` that no `mod` line reaches would
/// silently never compile or run; this fails instead, naming it.
#[test]
fn every_test_file_is_compiled() {
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let declared = |dir: &Path, file: &str| -> BTreeSet<String> {
        let text = std::fs::read_to_string(dir.join(file)).unwrap_or_default();
        text.lines()
            .filter_map(|l| l.trim().strip_prefix("mod ")?.strip_suffix(';'))
            .map(str::to_string)
            .collect()
    };
    let mut missing = Vec::new();
    let top = declared(&tests, "tests.rs");
    for entry in std::fs::read_dir(&tests).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() && path.join("mod.rs").is_file() {
            if !top.contains(&name) {
                missing.push(format!(
                    "tests/{name}/ (no `mod {name};` in tests/tests.rs)"
                ));
            }
            let inner = declared(&path, "mod.rs");
            for file in std::fs::read_dir(&path).unwrap() {
                let file = file.unwrap().path();
                let stem = file.file_stem().unwrap().to_string_lossy().into_owned();
                if file.extension().is_some_and(|e| e == "rs")
                    && stem != "mod"
                    && !inner.contains(&stem)
                {
                    missing.push(format!(
                        "tests/{name}/{stem}.rs (no `mod {stem};` in tests/{name}/mod.rs)"
                    ));
                }
            }
        } else if let Some(stem) = name.strip_suffix(".rs")
            && stem != "tests"
            && !top.contains(stem)
        {
            missing.push(format!("tests/{name} (no `mod {stem};` in tests/tests.rs)"));
        }
    }
    assert!(
        missing.is_empty(),
        "test files that no test binary compiles:\n  {}",
        missing.join("\n  ")
    );
}
