//! Where bench meets the operating system: the `Executor` seam, the real one, and the GPU
//! child process (`repro gpu-job`) run with a timeout.

use std::sync::{Arc, Mutex};

use super::*;
use crate::foundation::process::{Server, ServerEnd};

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
    ) -> Result<Output, ProcessError> {
        self.run_gpu_job_in(job, visible, timeout, 0)
    }

    /// [`Executor::run_gpu_job`] in the device's worker number `worker`: the processes
    /// of a split measurement ([`crate::engines::gpurun::Timing::processes`]) each have
    /// their own. An executor that starts a process for every job has nothing to tell
    /// apart.
    fn run_gpu_job_in(
        &self,
        job: &[u8],
        visible: Option<&str>,
        timeout: Duration,
        worker: usize,
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

    fn run_gpu_job_in(
        &self,
        job: &[u8],
        visible: Option<&str>,
        timeout: Duration,
        _worker: usize,
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

/// A worker answers at most this many jobs before it is replaced: whatever a job leaves
/// in the context (an event, a graph, fragmented memory) stays bounded.
const JOBS_PER_WORKER: usize = 64;

/// How long a worker replaced after a failed job (or its last one) may take to exit before it
/// is killed.
const RETIRE_LIMIT: Duration = Duration::from_secs(5);

/// One device's worker, if live, with the jobs it has answered.
type WorkerSlot = Arc<Mutex<Option<(Server, usize)>>>;

/// Which worker: the devices it sees (`CUDA_VISIBLE_DEVICES`, `None`: unset) and its number
/// among that device's workers (0 but for the later processes of a split measurement).
type WorkerKey = (Option<String>, usize);

/// An executor whose GPU jobs run in one reused child, `repro gpu-job --serve`, per set of
/// visible devices: one process and one CUDA context for a whole bisection, instead of a
/// process start, a driver start and a context creation for every job (about 0.3 s each).
/// A job that fails in any way (a trap, a driver error, a crash, a timeout) ends its
/// worker: its report or its fate is that job's answer alone, and the next job starts in
/// a fresh process, so a kernel that corrupts the context cannot touch a later commit.
/// The worker also exits by itself after a job whose report holds an error. Commands
/// (`run_shell`) run as [`ProcessExecutor`] runs them.
pub struct WorkerExecutor {
    inner: ProcessExecutor,
    /// Per `CUDA_VISIBLE_DEVICES` (`None`: unset) and number, the live worker and its job
    /// count.
    workers: Mutex<BTreeMap<WorkerKey, WorkerSlot>>,
    /// The devices (as `CUDA_VISIBLE_DEVICES`) that refused a second context.
    single: Mutex<std::collections::BTreeSet<Option<String>>>,
    /// Workers started so far (for tests and `-v`).
    started: std::sync::atomic::AtomicUsize,
}

impl WorkerExecutor {
    /// Workers of this very executable.
    pub fn current() -> Result<Self, ChildError> {
        Ok(Self::of(ProcessExecutor::current()?))
    }

    /// Workers of `inner`'s executable.
    pub fn of(inner: ProcessExecutor) -> Self {
        WorkerExecutor {
            inner,
            workers: Mutex::new(BTreeMap::new()),
            single: Mutex::new(std::collections::BTreeSet::new()),
            started: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// How many worker processes were started so far.
    pub fn started(&self) -> usize {
        self.started.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Starts `count` workers for device `device` now (the ones its jobs' [`run_child_with`]
    /// and a split measurement's processes go to), where not live, so that their processes
    /// and their drivers start while the caller does other work (a build, say); the jobs
    /// then find them ready. A worker that cannot start is not an error here: its first job
    /// tries again and reports why. On a device that refused a second context before, one.
    pub fn prestart(&self, device: usize, count: usize) {
        let parent = std::env::var("CUDA_VISIBLE_DEVICES").ok();
        let visible = only_device(parent.as_deref(), device);
        let visible = visible.as_deref();
        let count = if self.one_context(visible) { 1 } else { count };
        for worker in 0..count.max(1) {
            let slot = self.slot(visible, worker);
            let mut held = slot.lock().unwrap_or_else(|e| e.into_inner());
            if held.is_none()
                && let Ok(server) = self.spawn(visible)
            {
                *held = Some((server, 0));
            }
        }
    }

    fn slot(&self, visible: Option<&str>, worker: usize) -> WorkerSlot {
        let mut all = self.workers.lock().unwrap_or_else(|e| e.into_inner());
        all.entry((visible.map(str::to_string), worker))
            .or_default()
            .clone()
    }

    fn spawn(&self, visible: Option<&str>) -> Result<Server, ProcessError> {
        let Some(repro) = &self.inner.repro else {
            return Err(ProcessError::NotFound {
                program: "repro".into(),
            });
        };
        let mut cmd = Cmd::new(repro)
            .arg("gpu-job")
            .arg("--serve")
            .keep_tail(crate::foundation::process::STEP_KEEP);
        if let Some(v) = visible {
            // The child sees one device, its ordinal 0: its context is made at once, while
            // the parent builds, resolves and writes the first job.
            cmd = cmd.env("CUDA_VISIBLE_DEVICES", v).arg("--warm").arg("0");
        }
        let server = cmd.serve()?;
        self.started
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(server)
    }
}

impl Executor for WorkerExecutor {
    fn run_shell(
        &self,
        root: &Path,
        command: &str,
        timeout: Duration,
        device: Option<usize>,
    ) -> Result<Measured, ProcessError> {
        self.inner.run_shell(root, command, timeout, device)
    }

    /// A device that takes one context at a time (exclusive-process compute mode) refuses
    /// a worker its context while another kept worker holds one (they all make theirs as
    /// they start): the other workers of the device are ended, the job runs again in a
    /// fresh worker, and from then on every job of the device ends the others first. The
    /// processes of a split measurement then start one after another, each a context
    /// creation more, instead of together.
    fn run_gpu_job_in(
        &self,
        job: &[u8],
        visible: Option<&str>,
        timeout: Duration,
        worker: usize,
    ) -> Result<Output, ProcessError> {
        if self.one_context(visible) {
            self.end_others(visible, worker);
        }
        let out = self.answer_in(job, visible, timeout, worker)?;
        let refused =
            serde_json::from_slice::<Report>(&out.stdout).is_ok_and(|r| super::refused_context(&r));
        if refused && self.end_others(visible, worker) > 0 {
            self.single
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(visible.map(str::to_string));
            return self.answer_in(job, visible, timeout, worker);
        }
        Ok(out)
    }
}

impl WorkerExecutor {
    /// Whether the device refused a second context before ([`Executor::run_gpu_job_in`]).
    fn one_context(&self, visible: Option<&str>) -> bool {
        self.single
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&visible.map(str::to_string))
    }

    /// Ends every kept worker of the device but number `keep`; how many there were.
    fn end_others(&self, visible: Option<&str>, keep: usize) -> usize {
        let slots: Vec<WorkerSlot> = {
            let all = self.workers.lock().unwrap_or_else(|e| e.into_inner());
            all.iter()
                .filter(|((v, w), _)| v.as_deref() == visible && *w != keep)
                .map(|(_, slot)| slot.clone())
                .collect()
        };
        let mut ended = 0;
        for slot in slots {
            let taken = slot.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some((server, _)) = taken {
                server.finish(RETIRE_LIMIT);
                ended += 1;
            }
        }
        ended
    }

    /// Runs the job in the device's worker number `worker` (started now if none is live).
    fn answer_in(
        &self,
        job: &[u8],
        visible: Option<&str>,
        timeout: Duration,
        worker: usize,
    ) -> Result<Output, ProcessError> {
        let slot = self.slot(visible, worker);
        // One job at a time per worker; jobs for other devices use other workers.
        let mut held = slot.lock().unwrap_or_else(|e| e.into_inner());
        let live = held
            .take()
            .and_then(|(mut w, done)| w.alive().then_some((w, done)));
        let (mut server, done) = match live {
            Some(w) => w,
            None => (self.spawn(visible)?, 0),
        };
        let started = Instant::now();
        // A job is one line of JSON (serde_json never writes a raw newline).
        let answer = server.request(job, timeout);
        let elapsed = started.elapsed();
        let ok = std::os::unix::process::ExitStatusExt::from_raw(0);
        match answer {
            Ok(line) => {
                let healthy = serde_json::from_slice::<Report>(&line)
                    .map(|r| r.error.is_none())
                    .unwrap_or(false);
                if healthy && done + 1 < JOBS_PER_WORKER {
                    *held = Some((server, done + 1));
                } else {
                    // The next job's worker would otherwise start while this one still
                    // releases its context: on a GPU that allows one context at a time the
                    // new one could not make its own.
                    server.finish(RETIRE_LIMIT);
                }
                Ok(Output {
                    status: ok,
                    stdout: line,
                    stderr: Vec::new(),
                    elapsed,
                    stdout_dropped: 0,
                    stderr_dropped: 0,
                })
            }
            Err(ServerEnd::Timeout) => Err(ProcessError::Timeout {
                argv: server.display().to_string(),
                timeout,
                stdout: String::new(),
                stderr: String::new(),
            }),
            Err(ServerEnd::Ended { status, stderr }) => Ok(Output {
                status,
                stdout: Vec::new(),
                stderr,
                elapsed,
                stdout_dropped: 0,
                stderr_dropped: 0,
            }),
        }
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

/// [`run_child_with`] in the device's worker number `worker` ([`Executor::run_gpu_job_in`]).
pub fn run_child_in(
    exec: &dyn Executor,
    job: &Job,
    timeout: Duration,
    worker: usize,
) -> Result<Report, ChildError> {
    let parent = std::env::var("CUDA_VISIBLE_DEVICES").ok();
    run_child_seeing_in(exec, job, parent.as_deref(), timeout, worker)
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
    run_child_seeing_in(exec, job, parent, timeout, 0)
}

/// [`run_child_seeing`] in the device's worker number `worker`.
fn run_child_seeing_in(
    exec: &dyn Executor,
    job: &Job,
    parent: Option<&str>,
    timeout: Duration,
    worker: usize,
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
    match exec.run_gpu_job_in(&input, visible.as_deref(), timeout, worker) {
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
