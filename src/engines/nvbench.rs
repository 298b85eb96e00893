//! Reading nvbench's JSON output (`--json FILE`, with `--jsonbin` for per-sample times), so
//! that `repro compare` can compare an nvbench measurement with another, or with a result of
//! `repro bench`.
//!
//! nvbench's layout (JSON file version 1): `benchmarks[]` each with a `name` and `states[]`;
//! a state has a `name` (`Device=0 Elements=2^20`), `device`, `axis_values[]` (`name`,
//! `type`, `value` as a string), `is_skipped`, and `summaries[]`, each with a `tag` and
//! `data[]` of `{name, type, value}` (numbers as strings). Times are in seconds. The tag
//! `nv/json/bin:nv/cold/sample_times` names a binary file of little-endian float32 sample
//! times, written beside the JSON in `FILE-bin/`; without it only the mean and relative
//! standard deviation are known, which is not enough for the rank tests `compare` runs.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use crate::foundation::records::ResultRecord;

/// At most this many bytes of JSON are read.
const MAX_JSON_BYTES: u64 = 256 << 20;
/// At most this many samples are read from a sample-times file.
const MAX_SAMPLES: u64 = 10_000_000;
/// The summary tag of the per-sample times file.
const SAMPLE_TIMES_TAG: &str = "nv/json/bin:nv/cold/sample_times";

/// Why an nvbench file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum NvbenchError {
    /// The file could not be read.
    #[error("cannot read {}", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not nvbench JSON.
    #[error("{} is not nvbench JSON output: {what}", .path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
    /// The selector matched no state, or several.
    #[error("{}: {what}; its states are: {states}", .path.display())]
    Select {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        what: String,
        /// The states it has.
        states: String,
    },
    /// The state's sample file is not a file beside the JSON.
    #[error("{}: the sample file {file:?} {why}", .path.display())]
    SamplePath {
        /// The JSON file.
        path: PathBuf,
        /// The `filename` the state gives.
        file: String,
        /// What is wrong with it.
        why: String,
    },
    /// The state's sample file holds no usable samples.
    #[error("{}: the sample file {}: {what}", .path.display(), .file.display())]
    Samples {
        /// The JSON file.
        path: PathBuf,
        /// The sample file.
        file: PathBuf,
        /// What is wrong with it.
        what: String,
    },
    /// The state has no per-sample times.
    #[error("{}: state `{state}` has no per-sample times ({SAMPLE_TIMES_TAG})", .path.display())]
    NoSamples {
        /// The file.
        path: PathBuf,
        /// The state.
        state: String,
    },
}

impl crate::foundation::error::Diagnose for NvbenchError {
    fn exit_code(&self) -> u8 {
        match self {
            NvbenchError::Read { source, .. } => crate::foundation::fsutil::read_exit_code(source),
            _ => crate::foundation::exit::USAGE,
        }
    }
    fn hint(&self) -> Option<String> {
        Some(match self {
            NvbenchError::Read { .. } => "check the path; nvbench writes sample files to FILE-bin/ beside its JSON".into(),
            NvbenchError::Format { .. } => "pass the file nvbench wrote with `--json FILE`".into(),
            NvbenchError::Select { .. } => "name the state after the file: `out.json@Elements=2^20`".into(),
            NvbenchError::Samples { .. } => "nvbench writes each sample as a float32 of seconds, little-endian, greater than zero; run the benchmark again with `--jsonbin FILE` if the file was damaged".into(),
            NvbenchError::SamplePath { .. } => "nvbench names its sample files relative to the JSON (`--jsonbin out.json` writes out.json-bin/N.bin beside it); keep them there, and open the JSON from where they lie".into(),
            NvbenchError::NoSamples { .. } => "run the nvbench binary with `--jsonbin FILE` (not only `--json`): the rank tests need every sample".into(),
        })
    }
}

#[derive(Deserialize)]
struct Root {
    benchmarks: Vec<Bench>,
    #[serde(default)]
    devices: Vec<Device>,
}

#[derive(Deserialize)]
struct Device {
    id: i64,
    name: String,
}

#[derive(Deserialize)]
struct Bench {
    name: String,
    states: Vec<State>,
}

#[derive(Deserialize)]
struct State {
    name: String,
    #[serde(default)]
    device: Option<i64>,
    #[serde(default)]
    axis_values: Option<Vec<Named>>,
    #[serde(default)]
    summaries: Option<Vec<Summary>>,
    #[serde(default)]
    is_skipped: bool,
}

#[derive(Deserialize)]
struct Summary {
    tag: String,
    #[serde(default)]
    data: Vec<Named>,
}

#[derive(Deserialize)]
struct Named {
    name: String,
    value: Value,
}

impl Summary {
    fn get(&self, name: &str) -> Option<&Value> {
        self.data.iter().find(|d| d.name == name).map(|d| &d.value)
    }
}

/// One nvbench state as a record `compare` understands: `name`, `params`, `unit` (`us`),
/// `samples` (µs), `summary`, `machine`, `source`.
///
/// `selector` picks the state when the file has several: it must be a substring of exactly
/// one `BENCH STATE` (`copy Device=0 Elements=2^20`); none is needed for a file of one state.
pub fn load(path: &Path, selector: Option<&str>) -> Result<ResultRecord, NvbenchError> {
    let text = read_bounded(path)?;
    let format = |what: String| NvbenchError::Format {
        path: path.to_path_buf(),
        what,
    };
    let root: Root = serde_json::from_str(&text).map_err(|e| format(e.to_string()))?;
    let states: Vec<(String, &Bench, &State)> = root
        .benchmarks
        .iter()
        .flat_map(|b| {
            b.states
                .iter()
                .map(move |s| (format!("{} {}", b.name, s.name), b, s))
        })
        .filter(|(_, _, s)| !s.is_skipped)
        .collect();
    // The states, the first few by name (a file of thousands would flood the terminal).
    let all = || {
        let mut names: Vec<String> = states
            .iter()
            .take(LISTED_STATES)
            .map(|(n, _, _)| format!("`{}`", crate::foundation::output::clip(n, 200)))
            .collect();
        if states.len() > LISTED_STATES {
            names.push(format!("and {} more", states.len() - LISTED_STATES));
        }
        names.join(", ")
    };
    // A state named exactly (`BENCH STATE`, or the state's own name) is that state, also
    // where its name lies inside others' (`Elements=2^2` in `Elements=2^20`); else every
    // state whose name holds the text.
    let exact: Vec<&(String, &Bench, &State)> = states
        .iter()
        .filter(|(n, _, s)| selector.is_some_and(|sel| n == sel || s.name == sel))
        .collect();
    let chosen: Vec<&(String, &Bench, &State)> = if exact.len() == 1 {
        exact
    } else {
        states
            .iter()
            .filter(|(n, _, _)| selector.is_none_or(|sel| n.contains(sel)))
            .collect()
    };
    let (label, bench, state) = match chosen.as_slice() {
        [one] => *one,
        [] => {
            return Err(NvbenchError::Select {
                path: path.to_path_buf(),
                what: match selector {
                    Some(s) => format!(
                        "no state matches `{}`",
                        crate::foundation::output::clip(s, 200)
                    ),
                    None => "no state that was run".into(),
                },
                states: all(),
            });
        }
        _ => {
            return Err(NvbenchError::Select {
                path: path.to_path_buf(),
                what: format!(
                    "{} states match{}: pick one with FILE@TEXT",
                    chosen.len(),
                    selector.map_or(String::new(), |s| format!(
                        " `{}`",
                        crate::foundation::output::clip(s, 200)
                    ))
                ),
                states: all(),
            });
        }
    };
    let summaries = state.summaries.as_deref().unwrap_or_default();
    let bin = summaries
        .iter()
        .find(|s| s.tag == SAMPLE_TIMES_TAG)
        .and_then(|s| s.get("filename"))
        .and_then(Value::as_str)
        .ok_or_else(|| NvbenchError::NoSamples {
            path: path.to_path_buf(),
            state: label.clone(),
        })?;
    let samples = samples_beside(path, bin)?;
    let params: std::collections::BTreeMap<String, Value> = state
        .axis_values
        .as_deref()
        .unwrap_or_default()
        .iter()
        .map(|a| (a.name.clone(), a.value.clone()))
        .collect();
    let machine = state
        .device
        .and_then(|d| root.devices.iter().find(|x| x.id == d))
        .map(|d| d.name.clone());
    Ok(ResultRecord::external(
        "nvbench",
        bench.name.clone(),
        params,
        "us",
        samples.clone(),
        crate::engines::bench::summarize(&samples),
        machine.unwrap_or_default(),
    ))
}

/// The JSON file's text: a regular file (not a FIFO or a device) of at most
/// [`MAX_JSON_BYTES`].
fn read_bounded(path: &Path) -> Result<String, NvbenchError> {
    crate::foundation::fsutil::read_input_text(path, MAX_JSON_BYTES).map_err(|e| {
        NvbenchError::Read {
            path: e.path,
            source: e.source,
        }
    })
}

/// The samples file a state names, confined to the JSON file's directory: the JSON is
/// input from elsewhere (a colleague's results), so its `filename` must not make repro read
/// `/proc/self/status`, `../../secret` or a link out of that directory. nvbench writes the
/// path relative to where it ran, which is the JSON's directory when it is run as documented.
fn samples_beside(path: &Path, bin: &str) -> Result<Vec<f64>, NvbenchError> {
    let refuse = |why: &str| NvbenchError::SamplePath {
        path: path.to_path_buf(),
        file: bin.to_string(),
        why: why.to_string(),
    };
    let p = Path::new(bin);
    if bin.is_empty() || p.is_absolute() {
        return Err(refuse("is not a relative path"));
    }
    if !p.components().all(|c| {
        matches!(
            c,
            std::path::Component::Normal(_) | std::path::Component::CurDir
        )
    }) {
        return Err(refuse("climbs out of the JSON's directory (`..`)"));
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let bin_path = dir.join(p);
    // A link (anywhere along the path) may point out of the directory: what it resolves to
    // must still lie under the directory as resolved.
    let read_err = |source| NvbenchError::Read {
        path: bin_path.clone(),
        source,
    };
    let real_dir = std::fs::canonicalize(dir).map_err(read_err)?;
    let real = std::fs::canonicalize(&bin_path).map_err(read_err)?;
    if !real.starts_with(&real_dir) {
        return Err(refuse(&format!(
            "leads out of the JSON's directory (to {})",
            real.display()
        )));
    }
    read_samples(&real).map_err(|e| match e {
        SamplesError::Io(source) => NvbenchError::Read {
            path: bin_path.clone(),
            source,
        },
        other => NvbenchError::Samples {
            path: path.to_path_buf(),
            file: bin_path.clone(),
            what: other.to_string(),
        },
    })
}

/// Why a sample file cannot be used.
#[derive(Debug, thiserror::Error)]
enum SamplesError {
    /// It cannot be read.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// It holds nothing.
    #[error("it holds no samples (an empty file)")]
    Empty,
    /// Its length is not a multiple of 4.
    #[error("{len} bytes is not a whole number of float32 samples")]
    Partial {
        /// Its length.
        len: u64,
    },
    /// More samples than anyone takes.
    #[error("more than {MAX_SAMPLES} samples")]
    TooMany,
    /// A device, FIFO or directory where a file of samples belongs.
    #[error("it is not a regular file (a device, FIFO or directory is never read)")]
    NotRegular,
    /// A time that is not a positive number.
    #[error("sample {index} ({value}) is not a positive number of seconds")]
    NotPositive {
        /// Its place in the file, from 0.
        index: usize,
        /// What it holds.
        value: f32,
    },
}

/// How many states an error that lists them names.
const LISTED_STATES: usize = 20;

/// Little-endian float32 seconds → µs, from a regular file of at most [`MAX_SAMPLES`]
/// samples (a device such as `/dev/zero` or a FIFO is refused before it is read).
fn read_samples(path: &Path) -> Result<Vec<f64>, SamplesError> {
    use std::os::unix::fs::OpenOptionsExt;
    let meta = std::fs::metadata(path)?;
    if !meta.is_file() {
        return Err(SamplesError::NotRegular);
    }
    let len = meta.len();
    if len == 0 {
        return Err(SamplesError::Empty);
    }
    if len % 4 != 0 {
        return Err(SamplesError::Partial { len });
    }
    if len / 4 > MAX_SAMPLES {
        return Err(SamplesError::TooMany);
    }
    // Opened without blocking and checked again: the name may have been swapped since.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(SamplesError::NotRegular);
    }
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(file, len), &mut bytes)?;
    if bytes.len() % 4 != 0 {
        return Err(SamplesError::Partial {
            len: bytes.len() as u64,
        });
    }
    let samples: Vec<f64> = bytes
        .chunks_exact(4)
        .map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]])) * 1e6)
        .collect();
    if let Some(index) = samples.iter().position(|s| !s.is_finite() || *s <= 0.0) {
        let c = &bytes[index * 4..index * 4 + 4];
        return Err(SamplesError::NotPositive {
            index,
            value: f32::from_le_bytes([c[0], c[1], c[2], c[3]]),
        });
    }
    Ok(samples)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Writes an nvbench-shaped JSON with two states and their sample files.
    pub(crate) fn write_fixture(dir: &Path, scale: f32) -> PathBuf {
        let bin = dir.join("out.json-bin");
        std::fs::create_dir_all(&bin).unwrap();
        let mut states = Vec::new();
        for (i, n) in ["2^10", "2^20"].iter().enumerate() {
            let times: Vec<u8> = (0..50)
                .flat_map(|k| ((1e-5 + (k % 5) as f32 * 1e-8) * scale).to_le_bytes())
                .collect();
            std::fs::write(bin.join(format!("{i}.bin")), times).unwrap();
            states.push(json!({
                "name": format!("Device=0 Elements={n}"), "device": 0, "type_config_index": 0,
                "axis_values": [{"name": "Elements", "type": "int64", "value": n}],
                "summaries": [
                    {"tag": "nv/cold/time/gpu/mean", "name": "GPU Time", "hint": "duration",
                     "data": [{"name": "value", "type": "float64", "value": "1.0e-05"}]},
                    {"tag": SAMPLE_TIMES_TAG, "name": "Samples Times File", "hint": "file/sample_times",
                     "data": [{"name": "filename", "type": "string", "value": format!("out.json-bin/{i}.bin")},
                              {"name": "size", "type": "int64", "value": "50"}]}
                ],
                "is_skipped": false
            }));
        }
        let doc = json!({"meta": {"version": {"json": {"string": "1.0.0"}}},
            "devices": [{"id": 0, "name": "NVIDIA H200"}],
            "benchmarks": [{"name": "copy", "index": 0, "axes": [], "states": states}]});
        let path = dir.join("out.json");
        std::fs::write(&path, doc.to_string()).unwrap();
        path
    }

    #[test]
    fn a_sample_file_that_is_a_device_or_fifo_is_refused_unread() {
        // On /dev/zero a read without a bound never ends (issue 26, item 9).
        assert!(matches!(
            read_samples(Path::new("/dev/zero")),
            Err(SamplesError::NotRegular)
        ));
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("samples.bin");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(matches!(read_samples(&fifo), Err(SamplesError::NotRegular)));
        // Through the JSON: the state's sample file names the device.
        let json = write_fixture(d.path(), 1.0);
        let text = std::fs::read_to_string(&json).unwrap();
        assert!(text.contains("out.json-bin/0.bin"));
        std::fs::write(&json, text.replace("out.json-bin/0.bin", "/dev/zero")).unwrap();
        let e = load(&json, Some("2^10")).unwrap_err().to_string();
        assert!(
            e.contains("/dev/zero") || e.contains("not a regular file"),
            "{e}"
        );
    }

    #[test]
    fn a_sample_file_must_lie_beside_the_json() {
        let dir = tempfile::tempdir().unwrap();
        let path = write_fixture(dir.path(), 1.0);
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(
            outside.path().join("s.bin"),
            1e-5f32.to_le_bytes().repeat(8),
        )
        .unwrap();
        std::os::unix::fs::symlink(outside.path().join("s.bin"), dir.path().join("link.bin"))
            .unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("linkdir")).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        for (name, says) in [
            ("/proc/self/status", "is not a relative path"),
            ("../x/s.bin", "climbs out"),
            ("out.json-bin/../../s.bin", "climbs out"),
            ("link.bin", "leads out of the JSON's directory"),
            ("linkdir/s.bin", "leads out of the JSON's directory"),
        ] {
            let hostile = text.replace("out.json-bin/1.bin", name);
            std::fs::write(&path, hostile).unwrap();
            let e = load(&path, Some("2^20")).unwrap_err();
            assert!(matches!(e, NvbenchError::SamplePath { .. }), "{name}: {e}");
            assert!(e.to_string().contains(says), "{name}: {e}");
            let hint = crate::foundation::error::Diagnose::hint(&e).unwrap();
            assert!(!hint.contains("crash"), "{hint}");
        }
        // A time that is not a positive number is named by its place, as the sample
        // file's problem, not the JSON's.
        let mut times = 1e-5f32.to_le_bytes().repeat(8);
        times[12..16].copy_from_slice(&f32::NAN.to_le_bytes());
        std::fs::write(dir.path().join("nan.bin"), &times).unwrap();
        std::fs::write(&path, text.replace("out.json-bin/1.bin", "nan.bin")).unwrap();
        let e = load(&path, Some("2^20")).unwrap_err();
        assert!(matches!(e, NvbenchError::Samples { .. }), "{e}");
        let m = e.to_string();
        assert!(m.contains("nan.bin") && m.contains("sample 3 (NaN)"), "{m}");
        assert!(!m.contains("not nvbench JSON"), "{m}");
        // An empty file says so, not that the result crashed.
        std::fs::write(dir.path().join("empty.bin"), b"").unwrap();
        std::fs::write(&path, text.replace("out.json-bin/1.bin", "empty.bin")).unwrap();
        let e = load(&path, Some("2^20")).unwrap_err().to_string();
        assert!(e.contains("holds no samples"), "{e}");
        // A plain relative path beside it still reads, as does one opened by a bare name.
        std::fs::write(
            &path,
            text.replace("out.json-bin/1.bin", "./out.json-bin/1.bin"),
        )
        .unwrap();
        assert_eq!(load(&path, Some("2^20")).unwrap().samples.len(), 50);
    }

    /// A file of thousands of states names the first few when no state is chosen.
    #[test]
    fn an_error_lists_at_most_a_few_states() {
        let dir = tempfile::tempdir().unwrap();
        let states: Vec<_> = (0..5000)
            .map(|i| json!({"name": format!("S={i}"), "summaries": []}))
            .collect();
        let doc = json!({"benchmarks": [{"name": "b", "states": states}]});
        let path = dir.path().join("many.json");
        std::fs::write(&path, doc.to_string()).unwrap();
        let e = load(&path, None).unwrap_err().to_string();
        assert!(
            e.contains("5000 states match") && e.contains("`b S=19`"),
            "{e}"
        );
        assert!(
            e.contains("and 4980 more") && !e.contains("`b S=20`"),
            "{e}"
        );
        assert!(e.len() < 1000, "{} bytes", e.len());
    }

    #[test]
    fn reads_a_state_and_its_samples() {
        let dir = tempfile::tempdir().unwrap();
        let path = write_fixture(dir.path(), 1.0);
        let r = load(&path, Some("2^20")).unwrap();
        assert_eq!(r.name, "copy");
        assert_eq!(r.machine, "NVIDIA H200");
        assert_eq!(r.params["Elements"], "2^20");
        assert_eq!(r.samples.len(), 50);
        let median = r.median().unwrap();
        assert!((median - 10.02).abs() < 0.01, "{median}");
        // Two states and no selector: an error that lists them.
        let e = load(&path, None).unwrap_err().to_string();
        assert!(
            e.contains("2 states match") && e.contains("`copy Device=0 Elements=2^10`"),
            "{e}"
        );
        let e = load(&path, Some("nope")).unwrap_err().to_string();
        assert!(e.contains("no state matches `nope`"), "{e}");
        // A state named exactly is that state, also where the name lies inside another's
        // (`Elements=2^2` inside `Elements=2^20`), by its whole label or its own name.
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replace("Elements=2^10", "Elements=2^2")).unwrap();
        for sel in ["copy Device=0 Elements=2^2", "Device=0 Elements=2^2"] {
            let r = load(&path, Some(sel)).unwrap();
            assert_eq!(r.params["Elements"], "2^10", "{sel}");
        }
        let e = load(&path, Some("Elements=2^2")).unwrap_err().to_string();
        assert!(e.contains("2 states match"), "{e}");
        std::fs::write(&path, &text).unwrap();
        // Not nvbench at all.
        std::fs::write(dir.path().join("x.json"), "{\"results\": []}").unwrap();
        assert!(matches!(
            load(&dir.path().join("x.json"), None),
            Err(NvbenchError::Format { .. })
        ));
        // A state without its sample file.
        std::fs::remove_file(dir.path().join("out.json-bin/1.bin")).unwrap();
        assert!(matches!(
            load(&path, Some("2^20")),
            Err(NvbenchError::Read { .. })
        ));
    }
}
