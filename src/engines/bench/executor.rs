//! Where bench meets the operating system: the `Executor` seam, the real one, and the GPU
//! child process (`repro gpu-job`) run with a timeout.

use super::*;

/// How bench starts and measures its child processes: the seam between the bench logic
/// (warm-ups, runs, convergence, failures, timeouts, reading a report or a metric) and the
/// operating system, as hyperfine's `Executor` is. [`ProcessExecutor`] runs real processes
/// through `foundation::process`; the unit tests below script one instead.
pub trait Executor {
    /// Runs `sh -c COMMAND` in `root` (with `REPRO_DEVICE` set when a device is given),
    /// with a timeout, measuring its wall time and the CPU time of its process tree.
    fn run_shell(
        &self,
        root: &Path,
        command: &str,
        timeout: Duration,
        device: Option<usize>,
    ) -> Result<Measured, ProcessError>;

    /// Runs the GPU child (`repro gpu-job`) with the job on its stdin, with a timeout;
    /// `visible`, when given, is the child's `CUDA_VISIBLE_DEVICES` (see [`only_device`]).
    fn run_gpu_job(
        &self,
        job: &[u8],
        visible: Option<&str>,
        timeout: Duration,
    ) -> Result<Output, ProcessError>;
}

/// One finished run of a child, as an [`Executor`] measured it.
#[derive(Debug)]
pub struct Measured {
    /// Its exit status, output and wall time.
    pub output: Output,
    /// User CPU time of its processes, seconds.
    pub user_s: f64,
    /// System CPU time of its processes, seconds.
    pub system_s: f64,
}

/// The real executor: child processes through `foundation::process::Cmd`.
#[derive(Debug, Default)]
pub struct ProcessExecutor {
    /// The `repro` executable, for the GPU child; `None` runs commands only.
    repro: Option<std::path::PathBuf>,
}

impl ProcessExecutor {
    /// An executor whose GPU child is this very executable.
    pub fn current() -> Result<Self, ChildError> {
        let repro = std::env::current_exe().map_err(ChildError::NoExecutable)?;
        Ok(ProcessExecutor { repro: Some(repro) })
    }
}

impl Executor for ProcessExecutor {
    /// CPU time is measured as hyperfine does: the growth of this process's children's
    /// resource usage across the run (runs are sequential, and every child is waited for).
    fn run_shell(
        &self,
        root: &Path,
        command: &str,
        timeout: Duration,
        device: Option<usize>,
    ) -> Result<Measured, ProcessError> {
        let mut cmd = Cmd::new("sh")
            .arg("-c")
            .arg(command)
            .current_dir(root)
            .keep_tail(crate::foundation::process::STEP_KEEP)
            .timeout(timeout);
        if let Some(d) = device {
            cmd = cmd.env("REPRO_DEVICE", d.to_string());
        }
        let (u0, s0) = children_cpu();
        let output = cmd.output()?;
        let (u1, s1) = children_cpu();
        Ok(Measured {
            output,
            user_s: (u1 - u0).max(0.0),
            system_s: (s1 - s0).max(0.0),
        })
    }

    fn run_gpu_job(
        &self,
        job: &[u8],
        visible: Option<&str>,
        timeout: Duration,
    ) -> Result<Output, ProcessError> {
        let Some(repro) = &self.repro else {
            return Err(ProcessError::NotFound {
                program: "repro".into(),
            });
        };
        let mut cmd = Cmd::new(repro).arg("gpu-job");
        if let Some(v) = visible {
            cmd = cmd.env("CUDA_VISIBLE_DEVICES", v);
        }
        cmd.stdin_bytes(job.to_vec()).timeout(timeout).output()
    }
}

/// The `CUDA_VISIBLE_DEVICES` that shows the GPU child only the job's device (which it then
/// opens as ordinal 0), given the parent's own value: the `device`-th entry of the parent's
/// list, or the ordinal itself when the parent sees every GPU. A benchmark process then
/// makes no context and takes no memory on any other card, as a Slurm job given one GPU
/// does (on two H200s it is no faster: 0.742 s against 0.746 s a process, part 4 of
/// benches/gpu_multi.py). `None` (the child sees what the parent sees) when the parent's
/// list has no such entry: the child then fails as the parent would.
pub fn only_device(parent: Option<&str>, device: usize) -> Option<String> {
    match parent {
        None => Some(device.to_string()),
        Some(list) => list
            .split(',')
            .map(str::trim)
            .nth(device)
            .filter(|e| !e.is_empty())
            .map(str::to_string),
    }
}

/// Runs the child `repro gpu-job` with a timeout and turns its fate into a report.
pub fn run_child(job: &Job, timeout: Duration) -> Result<Report, ChildError> {
    run_child_with(&ProcessExecutor::current()?, job, timeout)
}

/// [`run_child`] through `exec`: a child that crashes, prints no report or runs past the
/// timeout gives a report with its error; only a child that cannot be started is `Err`.
pub fn run_child_with(
    exec: &dyn Executor,
    job: &Job,
    timeout: Duration,
) -> Result<Report, ChildError> {
    let parent = std::env::var("CUDA_VISIBLE_DEVICES").ok();
    run_child_seeing(exec, job, parent.as_deref(), timeout)
}

/// [`run_child_with`] for a parent whose `CUDA_VISIBLE_DEVICES` is `parent`.
pub(super) fn run_child_seeing(
    exec: &dyn Executor,
    job: &Job,
    parent: Option<&str>,
    timeout: Duration,
) -> Result<Report, ChildError> {
    let visible = only_device(parent, job.device);
    let input = match visible {
        Some(_) => serde_json::to_vec(&Job {
            device: 0,
            ..job.clone()
        }),
        None => serde_json::to_vec(job),
    }
    .expect("a job serialises");
    match exec.run_gpu_job(&input, visible.as_deref(), timeout) {
        Ok(out) => {
            let parsed = serde_json::from_slice::<Report>(&out.stdout);
            if let Ok(report) = parsed {
                return Ok(report);
            }
            let stderr = out.stderr_str();
            let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
            let tail = tail.into_iter().rev().collect::<Vec<_>>().join(" | ");
            let failure = match (out.status.code(), out.status.signal()) {
                (Some(code), _) => Failure::Exit {
                    code,
                    unreadable: (!out.stdout.is_empty())
                        .then(|| parsed.err().map(|e| e.to_string()).unwrap_or_default()),
                    tail,
                },
                (None, Some(signal)) => Failure::Signal { signal, tail },
                (None, None) => Failure::Exit {
                    code: -1,
                    unreadable: None,
                    tail,
                },
            };
            Ok(Report {
                error: Some(failure),
                ..Report::default()
            })
        }
        Err(ProcessError::Timeout { .. }) => Ok(Report {
            error: Some(Failure::Timeout {
                after_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
            }),
            ..Report::default()
        }),
        Err(e) => Err(e.into()),
    }
}
