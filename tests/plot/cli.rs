//! `repro plot`: the SVGs are rendered (with resvg, to pixels) rather than only written.

use crate::common;

use std::path::Path;

use common::{git, repo_with, repro};
use serde_json::json;

/// Renders an SVG and counts the pixels of a colour close to `rgb`.
fn pixels_like(svg: &str, rgb: (u8, u8, u8)) -> usize {
    let tree =
        resvg::usvg::Tree::from_str(svg, &resvg::usvg::Options::default()).expect("the SVG parses");
    let size = tree.size().to_int_size();
    let mut pixmap = resvg::tiny_skia::Pixmap::new(size.width(), size.height()).unwrap();
    resvg::render(
        &tree,
        resvg::tiny_skia::Transform::default(),
        &mut pixmap.as_mut(),
    );
    pixmap
        .pixels()
        .iter()
        .filter(|p| {
            p.red().abs_diff(rgb.0) < 40
                && p.green().abs_diff(rgb.1) < 40
                && p.blue().abs_diff(rgb.2) < 40
        })
        .count()
}

const GREEN: (u8, u8, u8) = (0x2e, 0x7d, 0x32);
const RED: (u8, u8, u8) = (0xc6, 0x28, 0x28);
const PURPLE: (u8, u8, u8) = (0x6a, 0x1b, 0x9a);

fn bench_here(tmp: &Path, root: &Path, value: f64) {
    let cmd = format!("echo '{{\"ms\": {value}}}'");
    repro(tmp)
        .arg("-C")
        .arg(root)
        .args([
            "bench",
            "--command",
            &cmd,
            "--name",
            "k",
            "--metric",
            "json:ms",
            "--unit",
            "ms",
            "--runs",
            "3",
            "-q",
        ])
        .assert()
        .success();
}

#[test]
fn results_across_commits_render_with_their_points() {
    let (tmp, root) = repo_with(&[("a.txt", "1")]);
    for (i, v) in [10.0, 11.0, 12.5].iter().enumerate() {
        std::fs::write(root.join("a.txt"), format!("{i}")).unwrap();
        git(&root, &["commit", "-qam", &format!("c{i}")]);
        bench_here(tmp.path(), &root, *v);
    }
    repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["plot", "k", "-o", "k.svg"])
        .assert()
        .success();
    let svg = std::fs::read_to_string(root.join("k.svg")).unwrap();
    assert_eq!(svg.matches("<circle").count(), 3, "one point per commit");
    assert!(pixels_like(&svg, GREEN) > 50, "the points are drawn");
    repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["plot", "nothing", "-o", "x.svg"])
        .assert()
        .code(2);
}

#[test]
fn a_sweep_renders_over_the_parameter() {
    let (tmp, root) = repo_with(&[]);
    let dir = root.join(".repro/results");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        root.join(".repro/store.json"),
        r#"{"kind":"repro-store","schema":1}"#,
    )
    .unwrap();
    for (i, n) in [128, 1024, 4096].iter().enumerate() {
        let m = 10.0 * f64::from(i as u32 + 1);
        // A recipe result as `repro bench` writes it on a GPU (tests/fixtures/records), at
        // three points of a sweep.
        let mut rec: serde_json::Value =
            serde_json::from_str(include_str!("../fixtures/records/result-recipe.json")).unwrap();
        rec["name"] = json!("fa");
        rec["params"] = json!({"seq_len": n});
        rec["created-at"] = json!(format!("2026-01-0{}T00:00:00Z", i + 1));
        // Samples around m, and their summary as bench writes it (a summary its samples
        // contradict is damage).
        let samples = [m * 0.98, m, m * 1.02];
        rec["samples"] = json!(samples);
        rec["summary"] = json!(repro::bench::summarize(&samples));
        std::fs::write(dir.join(format!("{i:064}.json")), repro::store::seal(&rec)).unwrap();
    }
    repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["plot", "fa", "--sweep", "seq_len", "-o", "sweep.svg"])
        .assert()
        .success();
    let svg = std::fs::read_to_string(root.join("sweep.svg")).unwrap();
    assert_eq!(svg.matches("<circle").count(), 3);
    assert!(svg.contains(">4096<"));
    assert!(pixels_like(&svg, GREEN) > 50);
}

#[test]
fn a_bisection_renders_with_its_ends_and_culprit() {
    let (tmp, root) = repo_with(&[("state.txt", "fine\n")]);
    for i in 1..=12 {
        std::fs::write(
            root.join("state.txt"),
            if i >= 7 { "broken\n" } else { "fine\n" },
        )
        .unwrap();
        std::fs::write(root.join("n.txt"), format!("{i}")).unwrap();
        git(&root, &["add", "-A"]);
        git(&root, &["commit", "-qm", &format!("commit {i}")]);
    }
    let out = repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args([
            "bisect",
            "--good",
            "HEAD~12",
            "--bad",
            "HEAD",
            "--script",
            "grep -q fine state.txt",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    std::fs::write(root.join("report.json"), &out.stdout).unwrap();
    repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["plot", "--bisect", "report.json", "-o", "bisect.svg"])
        .assert()
        .success();
    let svg = std::fs::read_to_string(root.join("bisect.svg")).unwrap();
    assert!(svg.contains("culprit commit 7"));
    assert!(
        pixels_like(&svg, RED) > 30,
        "bad steps and the bad end are drawn"
    );
    assert!(
        pixels_like(&svg, PURPLE) > 30,
        "the culprit's marker is drawn"
    );
}

#[test]
fn plot_speaks_json_takes_a_recorded_bisection_and_names_a_missing_report() {
    let (tmp, root) = common::repo_with(&[("ok.sh", "exit 0\n")]);
    for i in 0..3 {
        std::fs::write(
            root.join("ok.sh"),
            if i == 0 { "exit 0\n" } else { "exit 1\n" },
        )
        .unwrap();
        std::fs::write(root.join("n.txt"), format!("{i}\n")).unwrap();
        common::git(&root, &["add", "-A"]);
        common::git(&root, &["commit", "-q", "-m", &format!("c{i}")]);
    }
    let out = common::repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args([
            "--json", "bisect", "--good", "HEAD~3", "--bad", "HEAD", "--script", "sh ok.sh",
        ])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = v["id"].as_str().unwrap().to_string();
    let plot = |args: &[&str]| {
        common::repro(tmp.path())
            .arg("-C")
            .arg(&root)
            .arg("plot")
            .args(args)
            .assert()
    };
    // A missing report is a usage error (2) that names the file, not a bug (70).
    plot(&["--bisect", "missing.json", "-o", "x.svg"])
        .code(2)
        .stderr(predicates::str::contains("cannot read missing.json"))
        .stderr(predicates::str::contains("hint:"));
    // A recorded bisection by ID, with --json.
    let out = common::repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["--json", "plot", "--bisect", &id[..10], "-o", "b.svg"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["output"], "b.svg");
    assert_eq!(j["kind"], "bisection");
    assert!(j["points"].as_u64().unwrap() >= 2, "{j}");
    let svg = std::fs::read_to_string(root.join("b.svg")).unwrap();
    assert!(svg.starts_with("<svg"));
    // A script bisection has no timings: the axis says so instead of naming a median.
    assert!(
        svg.contains("verdict only (this mode is not timed)"),
        "{svg}"
    );
    assert!(!svg.contains("median of per-process medians"));
    plot(&["--bisect", "0000", "-o", "x.svg"]).code(2);
}
