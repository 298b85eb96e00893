//! Exporting result tables as JSON, CSV and Markdown (hyperfine's three formats).

use std::path::Path;

use serde_json::{Value, json};

use crate::foundation::error::{Diagnose, UserError};
use crate::foundation::fsutil::{self, WriteError};
use crate::foundation::records::ResultRecord;

/// One exported row: a result's identity and statistics (times in microseconds).
#[derive(Clone, Debug, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Row {
    /// Result ID.
    pub id: String,
    /// Recipe or command-bench name.
    pub name: String,
    /// Parameters as `k=v, ...`.
    pub params: String,
    /// Verdict.
    pub verdict: String,
    /// Samples.
    pub n: usize,
    /// Median.
    pub median: Option<f64>,
    /// 95% interval of the median.
    pub ci_low: Option<f64>,
    /// 95% interval of the median.
    pub ci_high: Option<f64>,
    /// Mean.
    pub mean: Option<f64>,
    /// Standard deviation.
    pub stdev: Option<f64>,
    /// Minimum.
    pub min: Option<f64>,
    /// Maximum.
    pub max: Option<f64>,
    /// Unit of the times.
    pub unit: String,
    /// Achieved bandwidth.
    pub gb_per_s: Option<f64>,
    /// Achieved compute.
    pub tflops: Option<f64>,
    /// hyperfine's `command`: the command of a command bench, else the name.
    #[serde(skip)]
    pub command: String,
    /// The parameters as hyperfine's `parameters` (name → value as text).
    #[serde(skip)]
    pub parameters: serde_json::Map<String, Value>,
    /// hyperfine's `times`: each sample in seconds (a time metric), or, for any other
    /// metric, the wall time of each run.
    #[serde(skip)]
    pub times_s: Vec<f64>,
    /// Mean user CPU time per run, seconds (command benches).
    #[serde(skip)]
    pub user_s: Option<f64>,
    /// Mean system CPU time per run, seconds (command benches).
    #[serde(skip)]
    pub system_s: Option<f64>,
    /// hyperfine's `median`: the result's median in seconds (a time metric: the mean of
    /// its bursts' medians where it was taken in bursts), or the median of `times_s`.
    #[serde(skip)]
    pub median_s: Option<f64>,
    /// The exit code of each timed run (command benches).
    #[serde(skip)]
    pub exit_codes: Option<Vec<i64>>,
}

impl Row {
    /// The row for a result record.
    pub fn from_record(id: &str, rec: &ResultRecord) -> Row {
        let s = rec.summary.as_ref();
        let f = |k: fn(&crate::foundation::stats::Summary) -> f64| s.map(k);
        let scale = match rec.unit.as_str() {
            "us" => Some(1e-6),
            "ms" => Some(1e-3),
            "s" => Some(1.0),
            _ => None,
        };
        let times_s: Vec<f64> = match scale {
            Some(k) => rec.samples.iter().map(|x| x * k).collect(),
            None => rec.wall_s.clone().unwrap_or_default(),
        };
        let median_s = match scale {
            Some(k) => s.map(|s| s.median * k),
            None => crate::foundation::stats::median(&times_s),
        };
        let mean_of = |v: &Option<Vec<f64>>| {
            v.as_ref()
                .filter(|v| !v.is_empty())
                .map(|v| v.iter().sum::<f64>() / v.len() as f64)
        };
        Row {
            command: rec.command.clone().unwrap_or_else(|| rec.name.clone()),
            parameters: rec
                .params
                .iter()
                .map(|(k, v)| {
                    let t = v.as_str().map_or_else(|| v.to_string(), str::to_string);
                    (k.clone(), Value::String(t))
                })
                .collect(),
            times_s,
            median_s,
            user_s: mean_of(&rec.user_s),
            system_s: mean_of(&rec.system_s),
            exit_codes: rec
                .exit_codes
                .as_ref()
                .map(|a| a.iter().map(|&c| i64::from(c)).collect()),
            id: id.to_string(),
            name: rec.name.clone(),
            params: rec.params_text(),
            verdict: rec.verdict.word().to_string(),
            n: rec.samples.len(),
            median: f(|s| s.median),
            ci_low: f(|s| s.ci_low),
            ci_high: f(|s| s.ci_high),
            mean: f(|s| s.mean),
            stdev: f(|s| s.stdev),
            min: f(|s| s.min),
            max: f(|s| s.max),
            unit: rec.unit.clone(),
            gb_per_s: rec.throughput.as_ref().and_then(|t| t.gb_per_s),
            tflops: rec.throughput.as_ref().and_then(|t| t.tflops),
        }
    }
}

fn num(v: Option<f64>) -> String {
    v.map_or(String::new(), |x| format!("{x:.4}"))
}

/// CSV with a header line; fields quoted where needed.
pub fn csv(rows: &[Row]) -> String {
    let q = |s: &str| {
        if s.contains([',', '"', '\n']) {
            format!("\"{}\"", s.replace('"', "\"\""))
        } else {
            s.to_string()
        }
    };
    let mut out = String::from(
        "id,name,params,verdict,n,median,ci_low,ci_high,mean,stdev,min,max,unit,gb_per_s,tflops\n",
    );
    for r in rows {
        let fields = [
            q(&r.id),
            q(&r.name),
            q(&r.params),
            q(&r.verdict),
            r.n.to_string(),
            num(r.median),
            num(r.ci_low),
            num(r.ci_high),
            num(r.mean),
            num(r.stdev),
            num(r.min),
            num(r.max),
            q(&r.unit),
            num(r.gb_per_s),
            num(r.tflops),
        ];
        out.push_str(&fields.join(","));
        out.push('\n');
    }
    out
}

/// A Markdown table.
pub fn markdown(rows: &[Row]) -> String {
    let mut out = String::from(
        "| result | name | params | verdict | n | median | 95% CI | mean ± stdev | min | max | GB/s | TFLOP/s |\n|---|---|---|---|---:|---:|---|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        out.push_str(&format!(
            "| `{}` | {} | {} | {} | {} | {} {} | [{}, {}] | {} ± {} | {} | {} | {} | {} |\n",
            crate::foundation::keys::short(&r.id),
            r.name,
            r.params,
            r.verdict,
            r.n,
            num(r.median),
            r.unit,
            num(r.ci_low),
            num(r.ci_high),
            num(r.mean),
            num(r.stdev),
            num(r.min),
            num(r.max),
            num(r.gb_per_s),
            num(r.tflops)
        ));
    }
    out
}

/// JSON in hyperfine's `--export-json` layout, so that tools reading hyperfine's exports
/// read these: `results[]` with `command`, `mean`, `stddev`, `median`, `user`, `system`,
/// `min`, `max` (seconds), `times[]` and `exit_codes[]`, and `parameters` where the result has
/// any. What hyperfine does not have (the ID, the verdict, the median's interval, the unit of
/// a non-time metric) is under `repro`. Values repro did not measure (CPU times of a GPU
/// kernel) are `null`.
pub fn json(rows: &[Row]) -> String {
    let results: Vec<Value> = rows
        .iter()
        .map(|r| {
            let t = &r.times_s;
            let n = t.len() as f64;
            let mean = (!t.is_empty()).then(|| t.iter().sum::<f64>() / n);
            let stddev = mean
                .filter(|_| t.len() > 1)
                .map(|m| (t.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (n - 1.0)).sqrt());
            let fold = |f: fn(f64, f64) -> f64| t.iter().copied().reduce(f);
            let mut o = json!({
                "command": r.command,
                "mean": mean,
                "stddev": stddev,
                "median": r.median_s,
                "user": r.user_s,
                "system": r.system_s,
                "min": fold(f64::min),
                "max": fold(f64::max),
                "times": t,
                "exit_codes": r.exit_codes,
                "repro": r,
            });
            if !r.parameters.is_empty() {
                o["parameters"] = Value::Object(r.parameters.clone());
            }
            o
        })
        .collect();
    serde_json::to_string_pretty(&json!({ "results": results })).expect("rows serialise") + "\n"
}

/// The `--export-json/--export-csv/--export-markdown FILE` options of a command.
#[derive(Debug, Default, clap::Args)]
pub struct ExportArgs {
    /// Also write the results as JSON.
    #[arg(long, value_name = "FILE")]
    pub export_json: Option<std::path::PathBuf>,
    /// Also write the results as CSV.
    #[arg(long, value_name = "FILE")]
    pub export_csv: Option<std::path::PathBuf>,
    /// Also write the results as a Markdown table.
    #[arg(long, value_name = "FILE")]
    pub export_markdown: Option<std::path::PathBuf>,
}

impl ExportArgs {
    /// The exports asked for: each option's name and its path as given.
    fn targets(&self) -> Vec<(&'static str, &Path)> {
        [
            ("--export-json", &self.export_json),
            ("--export-csv", &self.export_csv),
            ("--export-markdown", &self.export_markdown),
        ]
        .into_iter()
        .filter_map(|(o, p)| p.as_deref().map(|p| (o, p)))
        .collect()
    }

    /// Refuses, before anything runs, exports that would destroy what the command reads or
    /// each other: two to one file, one over an input (`inputs`, files the command reads;
    /// a file's nvbench sample directory `FILE-bin` with it), or one inside a repro store.
    /// Paths are compared resolved (links, `..`), relative to `cwd`.
    pub fn check(&self, cwd: &Path, inputs: &[std::path::PathBuf]) -> Result<(), UserError> {
        let targets = self.targets();
        let at: Vec<_> = targets
            .iter()
            .map(|(_, p)| fsutil::resolve(&cwd.join(p)))
            .collect();
        // Each input, and the directory of nvbench samples beside it (`FILE-bin`).
        let reads: Vec<_> = inputs
            .iter()
            .map(|input| {
                let input = fsutil::resolve(&cwd.join(input));
                let mut samples = input.clone().into_os_string();
                samples.push("-bin");
                (input, std::path::PathBuf::from(samples))
            })
            .collect();
        for (i, (option, path)) in targets.iter().enumerate() {
            if let Some(store) = fsutil::store_holding(&at[i]) {
                let e = WriteError::InsideStore {
                    path: path.to_path_buf(),
                    store,
                };
                let hint = e.hint().unwrap_or_default();
                return Err(UserError::usage(format!("{option} {e}")).hint(hint));
            }
            if let Some(j) = (0..i).find(|&j| at[j] == at[i]) {
                return Err(UserError::usage(format!(
                    "{} and {option} both name {}",
                    targets[j].0,
                    path.display()
                ))
                .hint("give each export a file of its own"));
            }
            for (input, samples) in &reads {
                if at[i] == *input || at[i].starts_with(samples) {
                    return Err(UserError::usage(format!(
                        "{option} {} would overwrite {}, which this command reads",
                        path.display(),
                        input.display()
                    ))
                    .hint("write the export to another file"));
                }
            }
        }
        Ok(())
    }

    /// Writes the rows in every format asked for, paths relative to `cwd`.
    pub fn write(&self, cwd: &Path, rows: &[Row]) -> Result<(), WriteError> {
        let at = |p: &Option<std::path::PathBuf>| p.as_ref().map(|p| cwd.join(p));
        write_all(
            rows,
            at(&self.export_json).as_deref(),
            at(&self.export_csv).as_deref(),
            at(&self.export_markdown).as_deref(),
        )
    }
}

/// Writes whichever exports were asked for.
pub fn write_all(
    rows: &[Row],
    json_to: Option<&Path>,
    csv_to: Option<&Path>,
    md_to: Option<&Path>,
) -> Result<(), WriteError> {
    for (path, text) in [
        (json_to, json(rows)),
        (csv_to, csv(rows)),
        (md_to, markdown(rows)),
    ] {
        if let Some(p) = path {
            fsutil::write_output(p, text.as_bytes(), true)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_quotes_and_markdown_has_a_row_per_result() {
        let r = Row {
            id: "abcdef0123456789".into(),
            name: "k".into(),
            params: "n=1, m=2".into(),
            verdict: "ok".into(),
            n: 3,
            median: Some(1.5),
            ci_low: Some(1.0),
            ci_high: Some(2.0),
            mean: Some(1.5),
            stdev: Some(0.1),
            min: Some(1.0),
            max: Some(2.0),
            unit: "us".into(),
            gb_per_s: None,
            tflops: Some(3.0),
            command: "k".into(),
            parameters: Default::default(),
            times_s: vec![1e-6, 2e-6, 1.5e-6],
            median_s: Some(1.5e-6),
            user_s: None,
            system_s: None,
            exit_codes: None,
        };
        let c = csv(std::slice::from_ref(&r));
        assert!(
            c.lines()
                .nth(1)
                .unwrap()
                .starts_with("abcdef0123456789,k,\"n=1, m=2\",ok,3,1.5000")
        );
        assert_eq!(markdown(&[r.clone(), r.clone()]).lines().count(), 4);
        // hyperfine's layout: seconds, sample standard deviation, the times themselves.
        let j: Value = serde_json::from_str(&json(&[r])).unwrap();
        let x = &j["results"][0];
        assert_eq!(x["command"], "k");
        assert!((x["mean"].as_f64().unwrap() - 1.5e-6).abs() < 1e-12);
        assert!((x["stddev"].as_f64().unwrap() - 0.5e-6).abs() < 1e-12);
        assert_eq!(x["median"], 1.5e-6);
        assert_eq!(x["min"], 1e-6);
        assert_eq!(x["max"], 2e-6);
        assert_eq!(x["times"].as_array().unwrap().len(), 3);
        assert!(x["user"].is_null());
        assert_eq!(x["repro"]["id"], "abcdef0123456789");
    }
}
