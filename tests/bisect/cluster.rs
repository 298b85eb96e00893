//! Many GPUs, many machines: performance bisections over several devices judged within
//! each device, steps run as jobs of a real Slurm cluster, and records shared through a
//! git remote.

use crate::common;

use std::path::Path;

use common::{git, repo_with, repro};
use serde_json::Value;

/// A history of `n` commits; `extra(i)` are the files commit i (1-based) writes.
fn history(
    n: usize,
    extra: impl Fn(usize) -> Vec<(String, String)>,
) -> (tempfile::TempDir, std::path::PathBuf) {
    let (tmp, root) = repo_with(&[("README", "a project\n")]);
    for i in 1..=n {
        std::fs::write(root.join("NOTES.md"), format!("note {i}\n")).unwrap();
        for (p, t) in extra(i) {
            let path = root.join(&p);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, t).unwrap();
            if p.ends_with(".sh") {
                std::fs::set_permissions(
                    &path,
                    std::os::unix::fs::PermissionsExt::from_mode(0o755),
                )
                .unwrap();
            }
        }
        git(&root, &["add", "-A"]);
        git(&root, &["commit", "-q", "-m", &format!("commit {i}")]);
    }
    (tmp, root)
}

fn bisect(tmp: &Path, root: &Path, args: &[&str]) -> (i32, Value, String) {
    let out = repro(tmp)
        .arg("-C")
        .arg(root)
        .args(["bisect", "--json"])
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        serde_json::from_slice(&out.stdout).unwrap_or(Value::Null),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A noisy "time" from base.txt; GPU 1 (`$REPRO_DEVICE`) is a card 8% slower than GPU 0,
/// as two cards of one model with different clocks can be.
const TWO_CARDS: &str = "r=$(od -An -N2 -tu2 /dev/urandom | tr -d ' '); f=1; [ \"$REPRO_DEVICE\" = 1 ] && f=1.08; awk -v base=$(cat base.txt) -v f=$f -v r=$r 'BEGIN { printf \"{\\\"t\\\": %.4f}\\n\", base * f * (1 + (r / 65535 - 0.5) * 0.01) }'";

#[test]
fn two_devices_judge_each_against_its_own_baseline() {
    let bench = |back: &str| {
        vec![
            "--good".to_string(),
            back.to_string(),
            "--bad".into(),
            "HEAD".into(),
            "--mode".into(),
            "bench".into(),
            "--command".into(),
            TWO_CARDS.into(),
            "--metric".into(),
            "json:t".into(),
            "--threshold".into(),
            "5%".into(),
            "--devices".into(),
            "0,1".into(),
        ]
    };
    // A/A: nothing changes, but the second card is slower. Compared across cards the bad
    // end would be 8% slower; each card against itself finds nothing.
    let (tmp, root) = history(8, |_| vec![("base.txt".into(), "100\n".into())]);
    let args = bench("HEAD~7");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, _, stderr) = bisect(tmp.path(), &root, &args);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("the bad end") && stderr.contains("is not bad"),
        "{stderr}"
    );
    // The same history measured on GPU 1 against a baseline from GPU 0 is what the
    // comparison must never be: the store holds a good end for each card.
    let records: Vec<Value> = std::fs::read_dir(root.join(".repro/bisect"))
        .unwrap()
        .map(|e| serde_json::from_slice(&std::fs::read(e.unwrap().path()).unwrap()).unwrap())
        .collect();
    let good_end = git(&root, &["rev-parse", "HEAD~7"]);
    let devices: std::collections::BTreeSet<u64> = records
        .iter()
        .filter(|r| r["commit"] == good_end.as_str())
        .map(|r| {
            r["question"]["question"]["settings"]["device"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(devices, [0, 1].into(), "{records:?}");

    // A real 10% slowdown at commit 9 is found, on both cards, and re-checked on one.
    let (tmp, root) = history(16, |i| {
        vec![(
            "base.txt".into(),
            if i >= 9 { "110\n" } else { "100\n" }.into(),
        )]
    });
    let args = bench("HEAD~15");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, v, stderr) = bisect(tmp.path(), &root, &args);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(v["culprit"]["subject"], "commit 9", "{v}");
    let culprit = v["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["subject"] == "commit 9")
        .unwrap();
    let detail = culprit["detail"].as_str().unwrap();
    assert!(
        detail.contains("GPU 0: bad") && detail.contains("GPU 1: bad"),
        "{detail}"
    );
    let ratio = culprit["ratio"][0].as_f64().unwrap();
    assert!((ratio - 1.10).abs() < 0.01, "{ratio}");
    assert_eq!(v["recheck"]["confirmed"], true, "{v}");
}

/// Slurm tests submit to one cluster and cancel its jobs: one at a time.
static SLURM: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The cluster, held for this test alone, if one answers here (else the test skips).
fn slurm() -> Option<std::sync::MutexGuard<'static, ()>> {
    slurm_up().then(|| SLURM.lock().unwrap_or_else(|e| e.into_inner()))
}

/// Whether a Slurm cluster answers here. Without one the Slurm tests skip, saying why,
/// unless REPRO_TEST_REQUIRE_SLURM is set (CI starts one with .ci/slurm-up).
fn slurm_up() -> bool {
    let why = match std::process::Command::new("sinfo")
        .args(["-h", "-o", "%T"])
        .output()
    {
        Ok(o) if o.status.success() && !o.stdout.is_empty() => return true,
        Ok(o) => format!("sinfo: {}", String::from_utf8_lossy(&o.stderr).trim()),
        Err(e) => format!("no sinfo on the PATH: {e}"),
    };
    if std::env::var_os("REPRO_TEST_REQUIRE_SLURM").is_some() {
        panic!(
            "REPRO_TEST_REQUIRE_SLURM is set but no Slurm cluster answers ({why}); .ci/slurm-up starts one"
        );
    }
    common::skip(&format!(
        "needs a Slurm cluster: none answers ({why}); .ci/slurm-up starts one"
    ));
    false
}

/// The Slurm jobs whose working directory is under `store`: (id, state).
fn jobs_under(store: &Path) -> Vec<(String, String)> {
    let out = std::process::Command::new("squeue")
        .args(["-h", "-o", "%i|%T|%Z"])
        .output()
        .unwrap();
    let store = store.to_string_lossy().into_owned();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('|').collect();
            (f.len() == 3 && f[2].starts_with(&store)).then(|| (f[0].into(), f[1].into()))
        })
        .collect()
}

fn job_state(id: &str) -> String {
    let out = std::process::Command::new("scontrol")
        .args(["show", "job", id])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .find_map(|w| w.strip_prefix("JobState=").map(str::to_string))
        .unwrap_or_default()
}

/// A 40-commit history whose state breaks at commit 27; the script sleeps so that jobs
/// can be caught running.
fn state_history() -> (tempfile::TempDir, std::path::PathBuf) {
    history(40, |i| {
        vec![(
            "state.txt".into(),
            if i >= 27 { "broken\n" } else { "fine\n" }.into(),
        )]
    })
}

const STATE_SCRIPT: &str = "sleep 2; grep -q fine state.txt";

fn spawn_repro(tmp: &Path, root: &Path, store: &Path, args: &[&str]) -> std::process::Child {
    std::process::Command::new(assert_cmd::cargo::cargo_bin("repro"))
        .arg("-C")
        .arg(root)
        .arg("--store")
        .arg(store)
        .arg("bisect")
        .args(args)
        .env("XDG_CACHE_HOME", tmp)
        .env("NO_COLOR", "1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn slurm_jobs_find_the_local_answer_and_survive_a_cancelled_job() {
    let Some(_one) = slurm() else {
        return;
    };
    let (tmp, root) = state_history();
    let range = [
        "--good",
        "HEAD~39",
        "--bad",
        "HEAD",
        "--script",
        STATE_SCRIPT,
    ];
    let local_store = tmp.path().join("local-store");
    let (code, local, stderr) = bisect(
        tmp.path(),
        &root,
        &[
            &["--store", local_store.to_str().unwrap(), "--jobs", "4"],
            &range[..],
        ]
        .concat(),
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(local["culprit"]["subject"], "commit 27");

    // The same bisection as Slurm jobs, four at a time; one running job is cancelled.
    let store = tmp.path().join("slurm-store");
    let child = spawn_repro(
        tmp.path(),
        &root,
        &store,
        &[&["--executor", "slurm", "--jobs", "4"], &range[..]].concat(),
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let cancelled = loop {
        if let Some((id, _)) = jobs_under(&store).into_iter().find(|(_, s)| s == "RUNNING") {
            let st = std::process::Command::new("scancel")
                .arg(&id)
                .status()
                .unwrap();
            assert!(st.success());
            break id;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no job of the bisection was seen running"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stdout.contains("first bad commit: ") && stdout.contains("subject  commit 27"),
        "{stdout}"
    );
    assert_eq!(job_state(&cancelled), "CANCELLED");
    assert!(
        stderr.contains(&format!("Slurm job {cancelled} for"))
            && stderr.contains("ended CANCELLED without a result; resubmitting"),
        "{stderr}"
    );
    assert!(stderr.contains("after 1 lost jobs"), "{stderr}");
    // The steps' records are in the shared store: a rerun submits no job, and every
    // verdict is the script's (the cancelled job became no verdict of its own).
    let submitted = jobs_known(&store);
    let (code, again, stderr) = bisect(
        tmp.path(),
        &root,
        &[
            &[
                "--store",
                store.to_str().unwrap(),
                "--executor",
                "slurm",
                "--jobs",
                "4",
            ],
            &range[..],
        ]
        .concat(),
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(again["culprit"], local["culprit"], "{again}");
    assert_eq!(again["evaluated"], 0, "{again}");
    assert_eq!(jobs_known(&store), submitted, "a job was submitted");
    for s in again["steps"].as_array().unwrap() {
        let i = s["index"].as_u64().unwrap();
        let expected = if i >= 26 { "bad" } else { "good" };
        assert_eq!(s["verdict"], expected, "{s}");
    }
}

/// How many jobs the controller remembers (running or ended) that worked under `store`.
fn jobs_known(store: &Path) -> usize {
    let out = std::process::Command::new("scontrol")
        .args(["-o", "show", "job"])
        .output()
        .unwrap();
    let needle = format!("WorkDir={}", store.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(&needle))
        .count()
}

#[test]
fn ctrl_c_cancels_every_job() {
    let Some(_one) = slurm() else {
        return;
    };
    let (tmp, root) = state_history();
    let store = tmp.path().join("store");
    let mut child = spawn_repro(
        tmp.path(),
        &root,
        &store,
        &[
            "--executor",
            "slurm",
            "--jobs",
            "4",
            "--good",
            "HEAD~39",
            "--bad",
            "HEAD",
            "--script",
            "sleep 30",
        ],
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while !jobs_under(&store).iter().any(|(_, s)| s == "RUNNING") {
        assert!(std::time::Instant::now() < deadline, "no job started");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // SAFETY: kill only sends a signal to the child this test started.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGINT);
    }
    child.wait().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let left = jobs_under(&store);
        if left.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "jobs left after Ctrl-C: {left:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

#[test]
fn slurm_bad_input_is_named() {
    let (tmp, root) = state_history();
    let range = ["--good", "HEAD~39", "--bad", "HEAD", "--script", "true"];
    // No srun on the PATH (only a shell).
    let bin = tmp.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::os::unix::fs::symlink("/bin/sh", bin.join("sh")).unwrap();
    let out = repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["bisect", "--executor", "slurm"])
        .args(range)
        .env("PATH", &bin)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("needs Slurm's `srun`") && stderr.contains("hint:"),
        "{stderr}"
    );
    // Slurm options without Slurm.
    let out = repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["bisect", "--partition", "gpu"])
        .args(range)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    if !slurm_up() {
        return;
    }
    // A partition that does not exist: named, with the ones that do.
    let out = repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args([
            "bisect",
            "--executor",
            "slurm",
            "--partition",
            "no-such-part",
        ])
        .args(range)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--partition=no-such-part")
            && stderr.contains("invalid partition")
            && stderr.contains("the partitions here are:"),
        "{stderr}"
    );
    // Nothing was written for the refused bisection but the store's scratch space.
    assert!(!root.join(".repro/bisect").exists());
}

#[test]
fn slurm_jobs_answer_bench_questions_and_pass_an_abort_back() {
    let Some(_one) = slurm() else {
        return;
    };
    // A 10% slowdown at commit 5 of 8, measured by a command in Slurm jobs.
    let (tmp, root) = history(8, |i| {
        vec![
            (
                "base.txt".into(),
                if i >= 5 { "110\n" } else { "100\n" }.into(),
            ),
            ("n.txt".into(), format!("{i}\n")),
        ]
    });
    let store = tmp.path().join("slurm-store");
    let (code, v, stderr) = bisect(
        tmp.path(),
        &root,
        &[
            "--store",
            store.to_str().unwrap(),
            "--executor",
            "slurm",
            "--good",
            "HEAD~7",
            "--bad",
            "HEAD",
            "--mode",
            "bench",
            "--command",
            "r=$(od -An -N2 -tu2 /dev/urandom | tr -d ' '); awk -v b=$(cat base.txt) -v r=$r 'BEGIN { printf \"{\\\"t\\\": %.4f}\\n\", b * (1 + (r / 65535 - 0.5) * 0.01) }'",
            "--metric",
            "json:t",
            "--threshold",
            "5%",
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(v["culprit"]["subject"], "commit 5", "{v}");
    assert_eq!(v["recheck"]["confirmed"], true, "{v}");
    let culprit = v["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["subject"] == "commit 5")
        .unwrap();
    assert_eq!(culprit["verdict"], "bad", "{culprit}");
    let ratio = culprit["ratio"][0].as_f64().unwrap();
    assert!((ratio - 1.10).abs() < 0.01, "{ratio}");
    // Every step ran as a job: the cluster remembers jobs under the store.
    assert!(jobs_known(&store) >= 4, "{}", jobs_known(&store));

    // A script that aborts (exit 200) in a job stops the bisection as it does locally: the
    // same error, naming the commit and the status.
    let abort = ["--script", "test $(cat n.txt) -lt 3 || exit 200"];
    let range = ["--good", "HEAD~7", "--bad", "HEAD"];
    let store2 = tmp.path().join("slurm-store-2");
    let (code, v, stderr) = bisect(
        tmp.path(),
        &root,
        &[
            &["--store", store2.to_str().unwrap(), "--executor", "slurm"],
            &range[..],
            &abort[..],
        ]
        .concat(),
    );
    let head = git(&root, &["rev-parse", "--short=12", "HEAD"]);
    let said = format!("error: the script aborted the bisection at {head}: exited with code 200");
    assert_eq!(code, 1, "{stderr}");
    assert!(v.is_null(), "{v}");
    assert!(stderr.contains(&said), "{stderr}");
    let local_store = tmp.path().join("local-store");
    let (code, _, local) = bisect(
        tmp.path(),
        &root,
        &[
            &["--store", local_store.to_str().unwrap()],
            &range[..],
            &abort[..],
        ]
        .concat(),
    );
    assert_eq!(code, 1, "{local}");
    assert!(local.contains(&said), "{local}");
}

/// A 12-commit history whose script hangs from commit 7 on.
fn hang_history() -> (tempfile::TempDir, std::path::PathBuf) {
    history(12, |i| {
        vec![(
            "state.txt".into(),
            if i >= 7 { "hangs\n" } else { "fine\n" }.into(),
        )]
    })
}

#[test]
fn a_hanging_commit_gets_the_same_verdict_here_and_on_slurm() {
    let Some(_one) = slurm() else {
        return;
    };
    let (tmp, root) = hang_history();
    let range = [
        "--good",
        "HEAD~11",
        "--bad",
        "HEAD",
        "--timeout",
        "3s",
        "--script",
        "grep -q fine state.txt || sleep 600",
    ];
    let verdicts = |v: &Value| -> Vec<(String, String, String)> {
        v["steps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                (
                    s["subject"].as_str().unwrap().to_string(),
                    s["verdict"].as_str().unwrap().to_string(),
                    s["detail"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect()
    };
    let local_store = tmp.path().join("local-store");
    let (code, local, stderr) = bisect(
        tmp.path(),
        &root,
        &[&["--store", local_store.to_str().unwrap()], &range[..]].concat(),
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(local["culprit"]["subject"], "commit 7", "{local}");
    let store = tmp.path().join("slurm-store");
    let (code, slurm, stderr) = bisect(
        tmp.path(),
        &root,
        &[
            &["--store", store.to_str().unwrap(), "--executor", "slurm"],
            &range[..],
        ]
        .concat(),
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(slurm["culprit"], local["culprit"], "{slurm}");
    // Step for step the same verdicts and the same evidence: the timeout judged the hang
    // inside the job, which ended normally, once, with the limit derived from --timeout.
    assert_eq!(verdicts(&slurm), verdicts(&local));
    let culprit = verdicts(&slurm)
        .into_iter()
        .find(|s| s.0 == "commit 7")
        .unwrap();
    assert_eq!(culprit.1, "bad");
    assert!(
        culprit.2.contains("timeout: the script ran longer than 3s"),
        "{culprit:?}"
    );
    assert!(!stderr.contains("resubmitting"), "{stderr}");
    let shown = std::process::Command::new("scontrol")
        .args(["-o", "show", "job"])
        .output()
        .unwrap();
    let needle = format!("WorkDir={}", store.display());
    let ours: Vec<String> = String::from_utf8_lossy(&shown.stdout)
        .lines()
        .filter(|l| l.contains(&needle))
        .map(str::to_string)
        .collect();
    assert!(!ours.is_empty());
    for job in &ours {
        assert!(job.contains("TimeLimit=00:02:00"), "{job}");
        assert!(job.contains("JobState=COMPLETED"), "{job}");
    }
}

#[test]
fn a_time_limit_a_hang_would_meet_first_is_refused_before_any_job() {
    let (tmp, root) = hang_history();
    let store = tmp.path().join("store");
    for (limit, said) in [
        (
            "1",
            "--time-limit 1 is shorter than a step needs: its --timeout is 10m, so a job needs at least --time=11",
        ),
        ("1h", "--time-limit `1h` is not a Slurm time limit"),
    ] {
        let out = repro(tmp.path())
            .arg("-C")
            .arg(&root)
            .args(["--store", store.to_str().unwrap()])
            .args(["bisect", "--executor", "slurm", "--time-limit", limit])
            .args(["--good", "HEAD~11", "--bad", "HEAD", "--script", "true"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(said), "{stderr}");
        assert!(
            stderr.contains("repro derives --time=11 from --timeout"),
            "{stderr}"
        );
        assert!(!store.join("bisect").exists());
    }
}

/// A 10-commit history whose state breaks at commit 6.
fn short_history() -> (tempfile::TempDir, std::path::PathBuf) {
    history(10, |i| {
        vec![(
            "state.txt".into(),
            if i >= 6 { "broken\n" } else { "fine\n" }.into(),
        )]
    })
}

/// Runs `repro ARGS` as the batch script of `sbatch --wait SBATCH_ARGS`: its job id, exit
/// code (sbatch --wait exits with the script's), stdout and stderr.
fn in_sbatch(tmp: &Path, sbatch_args: &[&str], args: &[&str]) -> (String, i32, String, String) {
    let quote = |a: &str| format!("'{}'", a.replace('\'', "'\\''"));
    let script = std::iter::once(assert_cmd::cargo::cargo_bin("repro").display().to_string())
        .chain(args.iter().map(|a| a.to_string()))
        .map(|a| quote(&a))
        .collect::<Vec<_>>()
        .join(" ");
    let (out, err) = (tmp.join("driver.out"), tmp.join("driver.err"));
    let o = std::process::Command::new("sbatch")
        .args(["--wait", "--parsable"])
        .arg(format!("--output={}", out.display()))
        .arg(format!("--error={}", err.display()))
        .args(sbatch_args)
        .arg(format!("--wrap={script}"))
        .env("XDG_CACHE_HOME", tmp)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let id: String = String::from_utf8_lossy(&o.stdout)
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    (
        id,
        o.status.code().unwrap_or(-1),
        std::fs::read_to_string(out).unwrap_or_default(),
        std::fs::read_to_string(err).unwrap_or_default(),
    )
}

#[test]
fn a_driver_inside_sbatch_submits_each_step_as_a_job_of_its_own() {
    let Some(_one) = slurm() else {
        return;
    };
    let (tmp, root) = short_history();
    let store = tmp.path().join("store");
    let args = [
        "-C",
        root.to_str().unwrap(),
        "--store",
        store.to_str().unwrap(),
        "bisect",
        "--json",
        "--executor",
        "slurm",
        "--good",
        "HEAD~9",
        "--bad",
        "HEAD",
        "--script",
        "grep -q fine state.txt",
    ];
    let (driver, v) = commit_6_in_sbatch(
        tmp.path(),
        &[],
        &args,
        "plan: each step a Slurm job of its own (repro runs inside job {driver}, whose SLURM_* variables are not passed on)",
    );
    // Every step was a job of its own, none of them the driver's.
    let ids: std::collections::BTreeSet<String> = jobs_shown(&store)
        .iter()
        .filter_map(|l| {
            l.split_whitespace()
                .next()?
                .strip_prefix("JobId=")
                .map(str::to_string)
        })
        .collect();
    assert_eq!(
        ids.len(),
        v["evaluated"].as_u64().unwrap() as usize,
        "{ids:?}"
    );
    assert!(!ids.contains(&driver), "{ids:?}");

    // Asked for, the steps are job steps of the driver's allocation, which must hold the
    // GPU each step asks for: without one, refused before any step.
    let steps = [&args[..], &["--slurm-steps"]].concat();
    let (driver, code, _, stderr) = in_sbatch(tmp.path(), &[], &steps);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains(&format!(
            "allocation {driver} holds 0 GPUs; steps asking for --gres=gpu:1 cannot run in it"
        )) && stderr.contains("hint:"),
        "{stderr}"
    );
    let store2 = tmp.path().join("store2");
    let steps: Vec<&str> = steps
        .iter()
        .map(|a| {
            if *a == store.to_str().unwrap() {
                store2.to_str().unwrap()
            } else {
                a
            }
        })
        .collect();
    commit_6_in_sbatch(
        tmp.path(),
        &["--gres=gpu:1"],
        &steps,
        "plan: each step a job step of allocation {driver}",
    );
    // No job but the driver's worked in the second store.
    assert!(jobs_shown(&store2).is_empty());
}

/// Runs the bisection `args` of [`short_history`] inside an sbatch job submitted with
/// `sbatch_args`: it must name commit 6 and say `plan` (with `{driver}` the driver's job
/// ID) on stderr. Returns the driver's job ID and the report.
fn commit_6_in_sbatch(
    tmp: &Path,
    sbatch_args: &[&str],
    args: &[&str],
    plan: &str,
) -> (String, Value) {
    let (driver, code, stdout, stderr) = in_sbatch(tmp, sbatch_args, args);
    assert_eq!(code, 0, "{stderr}");
    let v: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["culprit"]["subject"], "commit 6", "{v}");
    let plan = plan.replace("{driver}", &driver);
    assert!(stderr.contains(&plan), "{plan}\n{stderr}");
    (driver, v)
}

/// The controller's view of every job that worked under `store`: one `scontrol -o` line each.
fn jobs_shown(store: &Path) -> Vec<String> {
    let out = std::process::Command::new("scontrol")
        .args(["-o", "show", "job"])
        .output()
        .unwrap();
    let needle = format!("WorkDir={}", store.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(&needle))
        .map(str::to_string)
        .collect()
}

#[test]
fn site_options_reach_every_job_and_the_record() {
    let Some(_one) = slurm() else {
        return;
    };
    let (tmp, root) = short_history();
    std::fs::write(
        root.join("repro.toml"),
        "schema = 1\n[slurm]\noptions = [\"--comment=from-the-config\", \"--mem=64M\"]\nexport = [\"SITE_VAR\"]\n",
    )
    .unwrap();
    let store = tmp.path().join("store");
    let run = |store: &Path, extra: &[&str]| {
        let out = repro(tmp.path())
            .arg("-C")
            .arg(&root)
            .args(["--store", store.to_str().unwrap(), "bisect", "--json"])
            .args(["--executor", "slurm", "--good", "HEAD~9", "--bad", "HEAD"])
            .args([
                "--script",
                "test \"$SITE_VAR\" = hello && grep -q fine state.txt",
            ])
            .args(extra)
            .env("SITE_VAR", "hello")
            // A site that passes nothing by default: the explicit list still gets through.
            .env("SLURM_EXPORT_ENV", "NONE")
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            serde_json::from_slice::<Value>(&out.stdout).unwrap_or(Value::Null),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, v, stderr) = run(
        &store,
        &[
            "--slurm-opt=--comment=from-the-command-line",
            "--slurm-opt=--cpus-per-task=1",
            "--gres=gpu:fake:1",
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(v["culprit"]["subject"], "commit 6", "{v}");
    let cluster = &v["cluster"];
    assert_eq!(cluster["executor"], "slurm", "{v}");
    let options: Vec<&str> = cluster["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o.as_str().unwrap())
        .collect();
    assert_eq!(
        options,
        [
            "--gres=gpu:fake:1",
            "--time=11",
            "--mem=64M",
            "--comment=from-the-command-line",
            "--cpus-per-task=1"
        ],
        "{v}"
    );
    assert!(
        cluster["export"]
            .as_array()
            .unwrap()
            .contains(&"SITE_VAR".into()),
        "{v}"
    );
    // Each job was submitted with them: the controller shows them.
    let jobs = jobs_shown(&store);
    assert_eq!(jobs.len(), 5, "{jobs:?}");
    for j in &jobs {
        for want in [
            "Comment=from-the-command-line",
            "MinMemoryNode=64M",
            "TresPerNode=gres:gpu:fake:1",
            "TimeLimit=00:11:00",
        ] {
            assert!(j.contains(want), "{want} not in {j}");
        }
    }
    // The recorded bisection carries them too.
    let id = v["id"].as_str().unwrap();
    let shown = repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["--store", store.to_str().unwrap(), "show", id])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.contains("--comment=from-the-command-line"), "{shown}");
    // Without the variable exported, the job's script does not see it: the good end fails.
    std::fs::write(
        root.join("repro.toml"),
        "schema = 1\n[slurm]\noptions = [\"--mem=64M\"]\n",
    )
    .unwrap();
    let (code, _, stderr) = run(&tmp.path().join("store2"), &[]);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("the good end") && stderr.contains("is not good"),
        "{stderr}"
    );
}

#[test]
fn site_options_slurm_refuses_are_named_before_any_job() {
    let (tmp, root) = short_history();
    let store = tmp.path().join("store");
    let run = |extra: &[&str]| {
        let out = repro(tmp.path())
            .arg("-C")
            .arg(&root)
            .args(["--store", store.to_str().unwrap(), "bisect"])
            .args(["--executor", "slurm", "--good", "HEAD~9", "--bad", "HEAD"])
            .args(["--script", "true"])
            .args(extra)
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // Refused by repro itself, with or without a cluster.
    for (opt, said) in [
        ("--slurm-opt=-p", "--slurm-opt: `-p` is not a long option"),
        (
            "--slurm-opt=--job-name=x",
            "--slurm-opt: `--job-name=x`: repro sets --job-name itself",
        ),
        ("--slurm-opt=--time=5", "the time limit is --time-limit"),
        (
            "--slurm-opt=--export=ALL",
            "repro passes an explicit export list",
        ),
        (
            "--slurm-export=1X",
            "`1X` is not an environment variable's name",
        ),
    ] {
        let (code, stderr) = run(&[opt]);
        assert_eq!(code, 2, "{opt}: {stderr}");
        assert!(
            stderr.contains(said) && stderr.contains("hint:"),
            "{opt}: {stderr}"
        );
    }
    std::fs::write(
        root.join("repro.toml"),
        "schema = 1\n[slurm]\noptions = [\n  \"--qos=normal\",\n  \"--wrap=x\",\n]\n",
    )
    .unwrap();
    let (code, stderr) = run(&[]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("repro.toml:5:4: [slurm] options: `--wrap=x`: repro sets --wrap itself"),
        "{stderr}"
    );
    std::fs::remove_file(root.join("repro.toml")).unwrap();
    if !slurm_up() {
        return;
    }
    // Refused by the controller: what it said, and what there is.
    for (opts, said) in [
        (
            &["--gres=gpu:h100:1"][..],
            "Requested node configuration is not available",
        ),
        (
            &["--slurm-opt=--constraint=h100"][..],
            "Invalid feature specification",
        ),
        (
            &["--slurm-opt=--bogus-option=1"][..],
            "unrecognized option '--bogus-option=1'",
        ),
        (
            &["--slurm-opt=--mem=100T"][..],
            "Requested node configuration is not available",
        ),
    ] {
        let (code, stderr) = run(opts);
        assert_eq!(code, 2, "{opts:?}: {stderr}");
        assert!(
            stderr.contains("Slurm refuses these job options") && stderr.contains(said),
            "{opts:?}: {stderr}"
        );
        assert!(
            stderr.contains("the nodes' GRES are: gpu:fake:2"),
            "{stderr}"
        );
        assert!(jobs_shown(&store).is_empty(), "a job was submitted");
        assert!(!store.join("bisect").exists());
    }
}

#[test]
fn a_path_the_node_cannot_see_is_named_before_any_step() {
    let Some(_one) = slurm() else {
        return;
    };
    let (tmp, root) = short_history();
    // A directory only this test's private mount namespace sees: a tmpfs mounted over it
    // there, while slurmd (the node) sees the empty directory beneath.
    let private = tmp.path().join("private");
    std::fs::create_dir(&private).unwrap();
    let repro_bin = assert_cmd::cargo::cargo_bin("repro");
    let run = |setup: &str, repro: &str, store: &str| {
        let script = format!(
            "mount -t tmpfs tmpfs \"$P\" || exit 97; {setup}; exec {repro} -C \"$ROOT\" --store {store} bisect --executor slurm --good HEAD~9 --bad HEAD --script 'grep -q fine state.txt'"
        );
        std::process::Command::new("unshare")
            .args(["-m", "--propagation", "private", "sh", "-c", &script])
            .env("P", &private)
            .env("R", &repro_bin)
            .env("ROOT", &root)
            .env("XDG_CACHE_HOME", tmp.path())
            .env("NO_COLOR", "1")
            .output()
            .unwrap()
    };
    // The store where only this machine sees it.
    let out = run("mkdir \"$P/store\"", "\"$R\"", "\"$P/store\"");
    if out.status.code() == Some(97)
        || (out.status.code() == Some(1)
            && out.stdout.is_empty()
            && String::from_utf8_lossy(&out.stderr).contains("unshare"))
    {
        common::skip(&format!(
            "a_path_the_node_cannot_see_is_named_before_any_step: cannot make a private mount here: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
        return;
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    let store = private.join("store");
    assert!(
        stderr.contains(" on node ")
            && stderr.contains(&format!("cannot use the store {}", store.display())),
        "{stderr}"
    );
    assert!(stderr.contains("hint: the repository, the store (--store) and repro itself must be on a file system the nodes mount"), "{stderr}");
    assert!(
        !stderr.contains("checking the good end"),
        "a step ran: {stderr}"
    );
    // The repro binary where only this machine sees it.
    let store = tmp.path().join("store");
    let out = run(
        "mkdir \"$P/bin\" && cp \"$R\" \"$P/bin/repro\"",
        "\"$P/bin/repro\"",
        store.to_str().unwrap(),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "cannot use the repro binary {}",
            private.join("bin/repro").display()
        )),
        "{stderr}"
    );
    assert!(jobs_shown(&store).is_empty(), "a step job was submitted");
    // Where the node sees everything, the probe passes and the steps run.
    let (code, v, stderr) = bisect(
        tmp.path(),
        &root,
        &[
            "--store",
            store.to_str().unwrap(),
            "--executor",
            "slurm",
            "--good",
            "HEAD~9",
            "--bad",
            "HEAD",
            "--script",
            "grep -q fine state.txt",
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(v["culprit"]["subject"], "commit 6", "{v}");
}

/// Whether `sacct` answers here (the cluster keeps accounting).
fn sacct_answers() -> bool {
    std::process::Command::new("sacct")
        .args(["-n", "-X", "-j", "1"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A job's state and run time in seconds as accounting gives them, once it has heard
/// that the job ended (waiting up to 30 s for it).
fn sacct_ended(job: &str) -> (String, f64) {
    for _ in 0..120 {
        let out = std::process::Command::new("sacct")
            .args(["-n", "-P", "-X", "-j", job, "-o", "State,ElapsedRaw"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if let Some((state, elapsed)) = text.trim().split_once('|')
            && !matches!(state, "PENDING" | "RUNNING" | "COMPLETING")
        {
            return (state.to_string(), elapsed.parse().unwrap());
        }
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    panic!("sacct never said that job {job} ended");
}

#[test]
fn the_record_gives_queue_wait_run_time_and_gpu_hours_per_step_and_in_total() {
    let Some(_one) = slurm() else {
        return;
    };
    // Four commits, broken from the third: three steps, each a job that waits.
    let (tmp, root) = history(4, |i| {
        vec![(
            "state.txt".into(),
            if i >= 3 { "broken\n" } else { "fine\n" }.into(),
        )]
    });
    let store = tmp.path().join("store");
    // Each job may start 2 s after it is submitted: a queue wait of at least 2 s.
    let args = [
        "--store",
        store.to_str().unwrap(),
        "--executor",
        "slurm",
        "--slurm-opt=--begin=now+2",
        "--good",
        "HEAD~3",
        "--bad",
        "HEAD",
        "--script",
        "sleep 2; grep -q fine state.txt",
    ];
    let (code, v, stderr) = bisect(tmp.path(), &root, &args);
    assert_eq!(code, 0, "{stderr}");
    let accounting = sacct_answers();
    // Where accounting lags behind the controller (a loaded machine), a job is taken from
    // the controller: either source, but the figures must be accounting's.
    let sources: &[&str] = if accounting {
        &["sacct", "scontrol"]
    } else {
        &["scontrol"]
    };
    let steps = v["steps"].as_array().unwrap();
    let mut run = 0.0;
    let mut gpu_hours = 0.0;
    for s in steps {
        let job = &s["job"];
        assert!(sources.contains(&job["source"].as_str().unwrap()), "{s}");
        assert_eq!(job["state"], "COMPLETED", "{s}");
        if accounting {
            let (state, elapsed) = sacct_ended(job["id"].as_str().unwrap());
            assert_eq!(state, "COMPLETED", "{s}");
            assert_eq!(job["run-s"].as_f64().unwrap(), elapsed, "{s}");
        }
        assert_eq!(job["gpus"], 1, "{s}");
        assert!(job["queue-wait-s"].as_f64().unwrap() >= 1.0, "{s}");
        let r = job["run-s"].as_f64().unwrap();
        assert!((2.0..60.0).contains(&r), "{s}");
        assert!(
            (job["gpu-hours"].as_f64().unwrap() - r / 3600.0).abs() < 1e-9,
            "{s}"
        );
        run += r;
        gpu_hours += r / 3600.0;
    }
    let usage = &v["cluster"]["usage"];
    // The steps' jobs and the probe's.
    assert_eq!(usage["jobs"], steps.len() + 1, "{usage}");
    let source = usage["source"].as_str().unwrap();
    let either = ["sacct", "scontrol", "sacct+scontrol"];
    assert!(
        if accounting {
            &either[..]
        } else {
            &either[1..2]
        }
        .contains(&source),
        "{usage}"
    );
    assert!(usage["run-s"].as_f64().unwrap() >= run, "{usage}");
    assert!(usage["gpu-hours"].as_f64().unwrap() >= gpu_hours, "{usage}");
    assert!(
        usage["queue-wait-s"].as_f64().unwrap() >= steps.len() as f64,
        "{usage}"
    );
    // repro show gives the same table as the bisection printed.
    let shown = repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args([
            "--store",
            store.to_str().unwrap(),
            "show",
            v["id"].as_str().unwrap(),
        ])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&shown.stdout);
    let first = steps[0]["job"]["id"].as_str().unwrap();
    assert!(
        shown.contains("cluster: each step a Slurm job of its own")
            && shown.contains(&format!("  {first} "))
            && shown.contains(&format!("all {} jobs", steps.len() + 1))
            && shown.contains(&format!("(from {source};")),
        "{shown}"
    );

    // Without accounting (sacct refuses, as with AccountingStorageType=none), and where
    // accounting lags (every job still RUNNING there), the controller's figures are used.
    let fakes = [
        "echo 'sacct: error: Slurm accounting storage is disabled' >&2\nexit 1",
        "while [ $# -gt 0 ]; do [ \"$1\" = -j ] && job=$2; shift; done\n\
         echo \"$job|RUNNING|2026-11-28T00:00:00|2026-11-28T00:00:01|Unknown|cpu=1\"",
    ];
    for (i, script) in fakes.iter().enumerate() {
        let bin = tmp.path().join(format!("bin{i}"));
        std::fs::create_dir(&bin).unwrap();
        let fake = bin.join("sacct");
        std::fs::write(&fake, format!("#!/bin/sh\n{script}\n")).unwrap();
        std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
        let store = tmp.path().join(format!("store-fake{i}"));
        let out = repro(tmp.path())
            .arg("-C")
            .arg(&root)
            .args(["--store", store.to_str().unwrap(), "bisect", "--json"])
            .args(["--executor", "slurm", "--good", "HEAD~3", "--bad", "HEAD"])
            .args(["--script", "grep -q fine state.txt"])
            .env("PATH", path)
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["cluster"]["usage"]["source"], "scontrol", "{script}: {v}");
        for s in v["steps"].as_array().unwrap() {
            assert_eq!(s["job"]["source"], "scontrol", "{script}: {s}");
            assert_eq!(s["job"]["state"], "COMPLETED", "{script}: {s}");
        }
    }
}

#[test]
fn a_detached_bisection_returns_at_once_survives_its_shell_and_finds_the_same_culprit() {
    let Some(_one) = slurm() else {
        return;
    };
    let (tmp, root) = short_history();
    let store = tmp.path().join("store");
    let range = [
        "--good",
        "HEAD~9",
        "--bad",
        "HEAD",
        "--script",
        "sleep 2; grep -q fine state.txt",
    ];
    // Submitted from a shell of its own that is hung up on as soon as the ID is out: an
    // SSH logout.
    let repro_bin = assert_cmd::cargo::cargo_bin("repro");
    let started = std::time::Instant::now();
    let mut shell = std::process::Command::new("setsid")
        .args(["sh", "-c", "\"$@\"; sleep 600", "sh"])
        .arg(&repro_bin)
        .arg("-C")
        .arg(&root)
        .args(["--store", store.to_str().unwrap(), "--json", "bisect"])
        .args(["--executor", "slurm", "--detach"])
        .args(range)
        .env("XDG_CACHE_HOME", tmp.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // --json prints one object: read it to its closing line, while the shell lives on.
    let mut out = std::io::BufReader::new(shell.stdout.take().unwrap());
    let mut first = String::new();
    loop {
        let mut line = String::new();
        if std::io::BufRead::read_line(&mut out, &mut line).unwrap() == 0 {
            break;
        }
        first.push_str(&line);
        if line == "}\n" {
            break;
        }
    }
    let returned = started.elapsed();
    // SAFETY: the shell runs in a session and process group of its own (setsid), which
    // this test started; SIGHUP to it is what a closed terminal sends.
    unsafe {
        libc::kill(-(shell.id() as libc::pid_t), libc::SIGHUP);
    }
    let _ = shell.wait();
    let id = first
        .split('"')
        .skip_while(|w| *w != "id")
        .nth(2)
        .unwrap_or_else(|| panic!("no id in {first}"))
        .to_string();
    assert_eq!(id.len(), 64, "{first}");
    let show = |json: bool| {
        let mut c = repro(tmp.path());
        c.arg("-C")
            .arg(&root)
            .args(["--store", store.to_str().unwrap()]);
        if json {
            c.arg("--json");
        }
        let out = c.args(["show", &id[..12]]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // It has not finished when the command returned: five steps of two seconds each. (On a
    // loaded machine it may have finished by the time `show` answers; then the record's own
    // times must say that it ran longer than the command took to return.)
    let now: Value = serde_json::from_str(&show(true)).unwrap();
    if now["record"].is_null() {
        assert!(
            ["PENDING", "RUNNING", "CONFIGURING"].contains(&now["state"].as_str().unwrap()),
            "{now}"
        );
    }
    let log = repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["--store", store.to_str().unwrap(), "--json", "log"])
        .output()
        .unwrap();
    let log: Value = serde_json::from_slice(&log.stdout).unwrap();
    if now["record"].is_null() && log["records"].as_array().is_none_or(Vec::is_empty) {
        // Still running: `log` lists it as a detached bisection.
        assert_eq!(log["detached"][0]["id"], id.as_str(), "{log}");
    } else {
        // Finished already (a loaded machine): `log` lists its record instead.
        assert_eq!(log["records"][0]["kind"], "bisection", "{log}");
    }
    // It finishes on its own, and `show ID` then shows the finished bisection.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(240);
    let done = loop {
        let v: Value = serde_json::from_str(&show(true)).unwrap();
        if !v["record"].is_null() || !v["error"].is_null() {
            break v;
        }
        assert!(std::time::Instant::now() < deadline, "not finished: {v}");
        std::thread::sleep(std::time::Duration::from_millis(500));
    };
    assert_eq!(done["exit"], 0, "{done}");
    let at = |v: &Value| {
        humantime::parse_rfc3339(v.as_str().unwrap_or_else(|| panic!("no time: {done}")))
            .unwrap_or_else(|e| panic!("{e}: {done}"))
    };
    let ran = at(&done["bisection"]["created-at"])
        .duration_since(at(&done["submitted-at"]))
        .unwrap_or_default();
    assert!(
        returned < ran,
        "the command took {returned:?} to return, the bisection {ran:?} to run: {done}"
    );
    assert_eq!(
        done["bisection"]["culprit"]["subject"], "commit 6",
        "{done}"
    );
    assert_eq!(done["progress"].as_array().unwrap().len(), 5, "{done}");
    let human = show(false);
    assert!(
        human.contains("detached bisection")
            && human.contains("first bad commit")
            && human.contains("commit 6"),
        "{human}"
    );
    // The same answer as a bisection run here.
    let (code, local, stderr) = bisect(
        tmp.path(),
        &root,
        &[
            &["--store", tmp.path().join("local").to_str().unwrap()],
            &range[..],
        ]
        .concat(),
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(done["bisection"]["culprit"], local["culprit"]);
}

#[test]
fn detach_is_refused_without_slurm_or_with_options_slurm_refuses() {
    let (tmp, root) = short_history();
    let store = tmp.path().join("store");
    let run = |extra: &[&str]| {
        let out = repro(tmp.path())
            .arg("-C")
            .arg(&root)
            .args(["--store", store.to_str().unwrap(), "bisect", "--detach"])
            .args(["--good", "HEAD~9", "--bad", "HEAD", "--script", "true"])
            .args(extra)
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, stderr) = run(&[]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("--detach submits the bisection's driver as a Slurm job")
            && stderr.contains("hint: add --executor slurm"),
        "{stderr}"
    );
    let (code, stderr) = run(&["--executor", "slurm", "--time-limit", "1"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("is shorter than a step needs"), "{stderr}");
    assert!(!store.join("detached").exists());
}

#[test]
fn the_documented_cluster_session_runs() {
    let Some(_one) = slurm() else {
        return;
    };
    let page = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/src/guide/cluster.md"),
    )
    .unwrap();
    let session = page
        .split("<!-- session: run by tests/bisect/cluster.rs -->\n```sh\n")
        .nth(1)
        .and_then(|s| s.split("\n```").next())
        .expect("docs/src/guide/cluster.md has the session block");
    // A history whose check.sh fails from commit 6 on.
    let (tmp, root) = history(10, |i| {
        vec![
            (
                "state.txt".into(),
                if i >= 6 { "broken\n" } else { "fine\n" }.into(),
            ),
            (
                "check.sh".into(),
                "#!/bin/sh\ngrep -q fine state.txt\n".into(),
            ),
        ]
    });
    let bin = assert_cmd::cargo::cargo_bin("repro");
    let path = format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap()
    );
    let out = std::process::Command::new("timeout")
        .args(["600", "sh", "-e", "-c", session])
        .current_dir(&root)
        .env("PATH", path)
        .env("XDG_CACHE_HOME", tmp.path())
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("debug* gpu:fake:2"), "{stdout}");
    assert!(stdout.contains("detached bisection"), "{stdout}");
    assert!(
        stdout.matches("subject  commit 6").count() >= 1
            && stdout.contains("cluster: each step a Slurm job of its own")
            && stdout.contains("(from "),
        "{stdout}"
    );
    // The batch driver's answer, every step from the store.
    let log = stdout.rsplit("first bad commit:").next().unwrap();
    assert!(log.contains("subject  commit 6"), "{stdout}");
    assert!(stdout.contains("5 answered from the store"), "{stdout}");
}
