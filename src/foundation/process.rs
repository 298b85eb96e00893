//! The one place where child processes are started.
//!
//! Every external program repro runs (compilers, `git`, `nix`, version probes, benchmark
//! children) goes through [`Cmd`]. It captures stdout and stderr, applies a timeout (killing
//! the whole process group, so a compiler's children die too), and turns a failure into a
//! [`ProcessError`] that shows the command line, the exit code or the signal's name, and the
//! tail of both streams. Nothing else in the crate constructs a `std::process::Command`.
//!
//! No child outlives repro. Every child leads a process group of its own, and the group is
//! killed when the child exits (a backgrounded grandchild holding the output pipes would
//! otherwise keep repro waiting), when it times out, and when repro itself dies: a small
//! guardian process (`sh`, started once) holds a pipe from repro and kills every group
//! still registered with it when that pipe closes, which happens on Ctrl-C, SIGTERM and
//! SIGKILL alike. The direct child also gets `PR_SET_PDEATHSIG`.

use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use wait_timeout::ChildExt;

use crate::foundation::error::Diagnose;
use crate::foundation::exit;

/// How many bytes of each stream an error message shows.
const TAIL_BYTES: usize = 2000;

/// How many bytes of each stream a command keeps unless told otherwise: the last 16 MiB.
/// A step that writes gigabytes (`head -c 1500000000 /dev/zero`) must not grow repro.
pub const DEFAULT_KEEP: usize = 16 << 20;

/// How many bytes of each stream a user's step keeps (a bisection script, a command bench,
/// a command build): its messages show a 2,000-byte tail, a metric is read from the end.
pub const STEP_KEEP: usize = 1 << 20;

/// How long the readers wait for more output once the child has ended or been killed: what
/// it wrote is already in the pipe, so only a process that escaped its group (`setsid
/// sleep 888 &`) and holds the pipe could make them wait longer.
const DRAIN_GRACE: Duration = Duration::from_millis(200);

/// How long the readers go on reading past [`DRAIN_GRACE`] while output keeps coming.
const DRAIN_LIMIT: Duration = Duration::from_secs(1);

/// A command to run: program, arguments, working directory, environment and timeout.
#[derive(Clone, Debug)]
pub struct Cmd {
    program: OsString,
    args: Vec<OsString>,
    cwd: Option<PathBuf>,
    env: Vec<(OsString, Option<OsString>)>,
    timeout: Option<Duration>,
    stdin: Option<Vec<u8>>,
    keep: usize,
}

/// What a finished command left behind.
#[derive(Debug)]
pub struct Output {
    /// The exit status.
    pub status: ExitStatus,
    /// What was written to stdout: all of it, or its last [`Cmd::keep_tail`] bytes.
    pub stdout: Vec<u8>,
    /// What was written to stderr, likewise.
    pub stderr: Vec<u8>,
    /// Wall time from spawn to exit.
    pub elapsed: Duration,
    /// How many bytes of stdout were dropped from the front to keep within the limit.
    pub stdout_dropped: u64,
    /// How many bytes of stderr were dropped likewise.
    pub stderr_dropped: u64,
}

impl Output {
    /// Stdout as (lossy) UTF-8.
    pub fn stdout_str(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
    /// Stderr as (lossy) UTF-8.
    pub fn stderr_str(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
}

/// Why a command did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// The program does not exist on the PATH or at the given path.
    #[error("`{program}` was not found")]
    NotFound {
        /// The program that was looked for.
        program: String,
    },
    /// The program exists but could not be started.
    #[error("could not start `{argv}`")]
    Spawn {
        /// The command line.
        argv: String,
        /// The operating system's reason.
        #[source]
        source: std::io::Error,
    },
    /// The program ran past its time limit and was killed with its process group.
    #[error("`{argv}` timed out after {}{}", humantime::format_duration(*.timeout), tails(.stdout, .stderr))]
    Timeout {
        /// The command line.
        argv: String,
        /// The limit it ran past.
        timeout: Duration,
        /// The tail of stdout.
        stdout: String,
        /// The tail of stderr.
        stderr: String,
    },
    /// The program exited unsuccessfully or was killed by a signal.
    #[error("`{argv}` {status}{}", tails(.stdout, .stderr))]
    Failed {
        /// The command line.
        argv: String,
        /// "exited with code N" or "was killed by SIGNAME".
        status: String,
        /// The exit code, if it exited normally.
        code: Option<i32>,
        /// The tail of stdout.
        stdout: String,
        /// The tail of stderr.
        stderr: String,
    },
    /// Reading the child's output or waiting for it failed.
    #[error("i/o error while running `{argv}`")]
    Io {
        /// The command line.
        argv: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

fn tails(stdout: &str, stderr: &str) -> String {
    let mut s = String::new();
    for (name, text) in [("stdout", stdout), ("stderr", stderr)] {
        let text = text.trim_end();
        if !text.is_empty() {
            s.push_str(&format!("\n--- {name} (tail) ---\n{text}"));
        }
    }
    s
}

impl Diagnose for ProcessError {
    fn exit_code(&self) -> u8 {
        match self {
            ProcessError::NotFound { .. } => exit::ENVIRONMENT,
            _ => exit::MISMATCH,
        }
    }
    fn hint(&self) -> Option<String> {
        match self {
            ProcessError::NotFound { program } => {
                Some(format!("install `{program}` or put it on the PATH"))
            }
            ProcessError::Timeout { .. } => {
                Some("raise the time limit if the command is expected to be slow".into())
            }
            _ => None,
        }
    }
}

impl Cmd {
    /// A command running `program` with no arguments.
    pub fn new(program: impl AsRef<OsStr>) -> Self {
        Cmd {
            program: program.as_ref().to_owned(),
            args: Vec::new(),
            cwd: None,
            env: Vec::new(),
            timeout: None,
            stdin: None,
            keep: DEFAULT_KEEP,
        }
    }

    /// Keeps only the last `bytes` of each stream (default [`DEFAULT_KEEP`]): the memory a
    /// command's output can take, whatever it writes.
    pub fn keep_tail(mut self, bytes: usize) -> Self {
        self.keep = bytes.max(1);
        self
    }

    /// Appends one argument.
    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Self {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    /// Appends several arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// Runs in `dir` instead of the current directory.
    pub fn current_dir(mut self, dir: impl AsRef<Path>) -> Self {
        self.cwd = Some(dir.as_ref().to_owned());
        self
    }

    /// Sets an environment variable for the child.
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.env
            .push((key.as_ref().to_owned(), Some(value.as_ref().to_owned())));
        self
    }

    /// Removes an environment variable for the child.
    pub fn env_remove(mut self, key: impl AsRef<OsStr>) -> Self {
        self.env.push((key.as_ref().to_owned(), None));
        self
    }

    /// Kills the child (and its process group) if it runs longer than `timeout`.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Feeds `bytes` to the child's stdin (otherwise stdin is closed).
    pub fn stdin_bytes(mut self, bytes: Vec<u8>) -> Self {
        self.stdin = Some(bytes);
        self
    }

    /// The command line, quoted where needed, for messages.
    pub fn display(&self) -> String {
        std::iter::once(&self.program)
            .chain(&self.args)
            .map(|a| shell_quote(&a.to_string_lossy()))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Runs the command and returns its output, whatever its exit status.
    /// Fails only if it could not be started, timed out, or its output could not be read.
    pub fn output(&self) -> Result<Output, ProcessError> {
        let argv = self.display();
        let mut command = self.command();
        let start = Instant::now();
        let mut child = command.spawn().map_err(|source| {
            if source.kind() == std::io::ErrorKind::NotFound {
                ProcessError::NotFound {
                    program: self.program.to_string_lossy().into_owned(),
                }
            } else {
                ProcessError::Spawn {
                    argv: argv.clone(),
                    source,
                }
            }
        })?;
        let group = Group::register(child.id());

        // Stdin, stdout and stderr are serviced by threads so that a child filling one pipe
        // while we wait on another cannot deadlock.
        let stdin_thread = match (child.stdin.take(), self.stdin.clone()) {
            (Some(mut pipe), Some(bytes)) => Some(std::thread::spawn(move || {
                use std::io::Write;
                // A child that exits without reading its input is not our error.
                let _ = pipe.write_all(&bytes);
            })),
            _ => None,
        };
        let stop = Arc::new(Mutex::new(None::<Instant>));
        let out_pipe = child.stdout.take().expect("stdout is piped");
        let err_pipe = child.stderr.take().expect("stderr is piped");
        let pipes = [pipe_inode(&out_pipe), pipe_inode(&err_pipe)];
        let out_thread = spawn_reader(out_pipe, self.keep, stop.clone());
        let err_thread = spawn_reader(err_pipe, self.keep, stop.clone());

        let io_err = |source| ProcessError::Io {
            argv: argv.clone(),
            source,
        };
        let waited = match self.timeout {
            Some(limit) => child.wait_timeout(limit),
            None => child.wait().map(Some),
        };
        let waited = match waited {
            Ok(w) => w,
            Err(e) => {
                kill_tree(&mut child);
                let _ = finish_reading(&stop, out_thread, err_thread, pipes);
                return Err(io_err(e));
            }
        };
        let elapsed = start.elapsed();
        let Some(status) = waited else {
            kill_tree(&mut child);
            drop(group);
            let (stdout, stderr) = finish_reading(&stop, out_thread, err_thread, pipes);
            return Err(ProcessError::Timeout {
                argv,
                timeout: self.timeout.unwrap_or_default(),
                stdout: tail(&stdout.map(|c| c.bytes).unwrap_or_default()),
                stderr: tail(&stderr.map(|c| c.bytes).unwrap_or_default()),
            });
        };
        // The child is done; whatever it left running in its group (`sleep 9 &`) would hold
        // the pipes open and keep us waiting for output that no one asked for.
        drop(group);
        if let Some(t) = stdin_thread {
            let _ = t.join();
        }
        let (stdout, stderr) = finish_reading(&stop, out_thread, err_thread, pipes);
        let (stdout, stderr) = (stdout.map_err(io_err)?, stderr.map_err(io_err)?);
        Ok(Output {
            status,
            stdout: stdout.bytes,
            stderr: stderr.bytes,
            elapsed,
            stdout_dropped: stdout.dropped,
            stderr_dropped: stderr.dropped,
        })
    }

    /// The `Command` to spawn: piped output, stdin only when given, a process group of its
    /// own, killed with its parent, in the directory and environment asked for.
    fn command(&self) -> Command {
        let mut command = self.command_unguarded();
        // SAFETY: the closure runs between fork and exec and calls only prctl, which is
        // async-signal-safe.
        unsafe {
            command.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
                Ok(())
            });
        }
        command
    }

    /// [`Cmd::command`] without the death signal, which follows the *thread* that spawned
    /// the child: a server outlives the thread that started it, and is still killed with
    /// repro by the guardian.
    fn command_unguarded(&self) -> Command {
        let mut command = Command::new(&self.program);
        command
            .args(&self.args)
            .stdin(if self.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // A process group of its own, so that a timeout kills the compiler's children too.
            .process_group(0);
        if let Some(dir) = &self.cwd {
            command.current_dir(dir);
        }
        for (k, v) in &self.env {
            match v {
                Some(v) => command.env(k, v),
                None => command.env_remove(k),
            };
        }
        command
    }

    /// Runs the command and requires it to exit with status 0.
    pub fn run(&self) -> Result<Output, ProcessError> {
        let out = self.output()?;
        if out.status.success() {
            Ok(out)
        } else {
            Err(ProcessError::Failed {
                argv: self.display(),
                status: describe_status(out.status),
                code: out.status.code(),
                stdout: tail(&out.stdout),
                stderr: tail(&out.stderr),
            })
        }
    }
}

/// A registered process group: killed, and unregistered from the guardian, when dropped.
struct Group(libc::pid_t);

impl Group {
    fn register(pid: u32) -> Group {
        let pgid = pid as libc::pid_t;
        guardian_send(&format!("+{pgid}"));
        Group(pgid)
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        // SAFETY: killpg only sends a signal; the group's id is the child's pid because the
        // child was started with process_group(0). An empty group gives ESRCH, ignored.
        unsafe {
            libc::killpg(self.0, libc::SIGKILL);
        }
        guardian_send(&format!("-{}", self.0));
    }
}

/// The guardian's script: it keeps the set of live groups and kills them all when repro's
/// end of the pipe closes. It ignores the signals a terminal sends, so it outlives repro.
const GUARDIAN: &str = r#"trap '' INT TERM HUP QUIT
g=' '
s=''
while read -r l; do
  op=${l%"${l#?}"}; p=${l#?}
  case "$op" in
    +) g="$g$p " ;;
    -) case "$g" in *" $p "*) g="${g%% $p *} ${g#* $p }" ;; esac ;;
    s) s="$s $p" ;;
  esac
done
for p in $g; do kill -s KILL -- "-$p" 2>/dev/null; done
for n in $s; do scancel --name="$n" >/dev/null 2>&1; done
"#;

/// Makes the guardian cancel every Slurm job named `name` when repro exits, however it
/// exits (Ctrl-C, SIGTERM, SIGKILL or a normal end, where it cancels nothing that still
/// runs). `name` must be letters, digits, `-` and `_`: it is a word of a shell command.
pub fn cancel_slurm_jobs_on_exit(name: &str) {
    if !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        guardian_send(&format!("s{name}"));
    }
}

static GUARDIAN_PIPE: std::sync::Mutex<Option<Option<std::process::ChildStdin>>> =
    std::sync::Mutex::new(None);

/// Sends one line to the guardian, starting it on first use. Best effort: without `sh` the
/// groups are still killed on timeout and at exit, just not after repro is killed.
fn guardian_send(line: &str) {
    use std::io::Write;
    let mut slot = GUARDIAN_PIPE.lock().unwrap_or_else(|e| e.into_inner());
    let pipe = slot.get_or_insert_with(|| {
        Command::new("sh")
            .args(["-c", GUARDIAN])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .ok()
            .and_then(|mut c| c.stdin.take())
    });
    if let Some(p) = pipe
        && writeln!(p, "{line}").is_err()
    {
        *pipe = None;
    }
}

/// Kills the child, its whole process group and every process descended from it (found
/// through `/proc` while the tree is still whole, so that a descendant that left the group
/// with `setsid` dies too), then reaps the child.
fn kill_tree(child: &mut std::process::Child) {
    let pid = child.id() as libc::pid_t;
    let tree = descendants(pid);
    // SAFETY: kill and killpg only send signals; the group id is the child's pid because
    // the child was started with process_group(0). A process already gone gives ESRCH.
    unsafe {
        libc::killpg(pid, libc::SIGKILL);
        for &p in &tree {
            libc::kill(p, libc::SIGKILL);
            libc::killpg(p, libc::SIGKILL);
        }
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Every live process descended from `root`, read from `/proc/*/stat` (empty where there
/// is no `/proc`).
fn descendants(root: libc::pid_t) -> Vec<libc::pid_t> {
    let mut parent_of = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid ...`: the name may hold spaces and parentheses.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<i32>().ok());
        if let Some(ppid) = ppid {
            parent_of.push((pid, ppid));
        }
    }
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let p = found[i];
        found.extend(parent_of.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    found.remove(0);
    found
}

/// What one reader kept of a stream.
struct Capture {
    /// The last bytes of the stream, at most the command's limit.
    bytes: Vec<u8>,
    /// How many bytes were dropped from the front.
    dropped: u64,
    /// Whether the stream ended (every writer closed it), rather than being abandoned.
    ended: bool,
}

impl Capture {
    fn push(&mut self, chunk: &[u8], keep: usize) {
        self.bytes.extend_from_slice(chunk);
        // Trimmed in batches, so that keeping a tail costs no more than copying it twice.
        if self.bytes.len() > keep.saturating_mul(2) {
            self.trim(keep);
        }
    }
    fn trim(&mut self, keep: usize) {
        if self.bytes.len() > keep {
            let cut = self.bytes.len() - keep;
            self.bytes.drain(..cut);
            self.dropped += cut as u64;
        }
    }
}

type Stop = Arc<Mutex<Option<Instant>>>;

/// The inode of a pipe's read end: the write end, held by whoever writes, shares it.
fn pipe_inode(pipe: &impl std::os::fd::AsRawFd) -> Option<u64> {
    // SAFETY: fstat writes only into the zeroed struct it is given.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        (libc::fstat(pipe.as_raw_fd(), &mut st) == 0).then_some(st.st_ino)
    }
}

/// Reads `pipe` on a thread, keeping the last `keep` bytes, until the stream ends or, once
/// `stop` holds a time, until nothing more comes by then (or [`DRAIN_LIMIT`] later while
/// output keeps coming): a process that escaped the child's group may hold the pipe open
/// for ever, and must not hold repro with it.
fn spawn_reader(
    mut pipe: impl Read + std::os::fd::AsRawFd + Send + 'static,
    keep: usize,
    stop: Stop,
) -> std::thread::JoinHandle<std::io::Result<Capture>> {
    std::thread::spawn(move || {
        let mut cap = Capture {
            bytes: Vec::new(),
            dropped: 0,
            ended: false,
        };
        let mut buf = vec![0u8; 64 * 1024];
        let fd = pipe.as_raw_fd();
        loop {
            let deadline = *stop.lock().unwrap_or_else(|e| e.into_inner());
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d + DRAIN_LIMIT) {
                break;
            }
            let wait = match deadline {
                None => Duration::from_millis(100),
                Some(d) => d
                    .saturating_duration_since(now)
                    .min(Duration::from_millis(100)),
            };
            let mut pfd = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd, for a descriptor this thread owns.
            let ready = unsafe { libc::poll(&mut pfd, 1, wait.as_millis() as libc::c_int) };
            if ready < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if ready == 0 {
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    break;
                }
                continue;
            }
            match pipe.read(&mut buf) {
                Ok(0) => {
                    cap.ended = true;
                    break;
                }
                Ok(n) => cap.push(&buf[..n], keep),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        cap.trim(keep);
        Ok(cap)
    })
}

/// Tells the readers the child is gone, collects what they kept, and kills whatever still
/// holds a pipe they gave up on.
fn finish_reading(
    stop: &Stop,
    out: std::thread::JoinHandle<std::io::Result<Capture>>,
    err: std::thread::JoinHandle<std::io::Result<Capture>>,
    inodes: [Option<u64>; 2],
) -> (std::io::Result<Capture>, std::io::Result<Capture>) {
    *stop.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now() + DRAIN_GRACE);
    let join = |t: std::thread::JoinHandle<std::io::Result<Capture>>| {
        t.join()
            .unwrap_or_else(|_| Err(std::io::Error::other("the output reader panicked")))
    };
    let (out, err) = (join(out), join(err));
    let abandoned: Vec<u64> = [&out, &err]
        .iter()
        .zip(inodes)
        .filter(|(c, _)| !c.as_ref().is_ok_and(|c| c.ended))
        .filter_map(|(_, ino)| ino)
        .collect();
    if !abandoned.is_empty() {
        kill_pipe_holders(&abandoned);
    }
    (out, err)
}

/// Kills every other process that holds one of the pipes `inodes`: what escaped the
/// child's process group and session but still writes where the child wrote.
fn kill_pipe_holders(inodes: &[u64]) {
    let me = std::process::id() as libc::pid_t;
    let names: Vec<String> = inodes.iter().map(|i| format!("pipe:[{i}]")).collect();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let holds = std::fs::read_dir(e.path().join("fd"))
            .into_iter()
            .flatten()
            .flatten()
            .any(|fd| {
                std::fs::read_link(fd.path())
                    .is_ok_and(|l| names.iter().any(|n| l.as_os_str() == n.as_str()))
            });
        if holds {
            // SAFETY: kill only sends a signal.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
    }
}

/// Lowers the calling thread's scheduling priority (Linux threads have their own nice
/// value), and so that of every child process it starts after: work done on speculation
/// (the builds of a bisection's next midpoints) must not take CPU time from a measurement
/// running beside it, which would make the commit being measured look slower.
pub fn lower_this_threads_priority() {
    // SAFETY: plain system calls on the calling thread; a failure leaves it as it was.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        let _ = libc::setpriority(libc::PRIO_PROCESS, tid, SPECULATIVE_NICE);
    }
}

/// The nice value of speculative work: a tenth of a normal thread's share where they meet.
const SPECULATIVE_NICE: libc::c_int = 10;

/// "exited with code 3" or "was killed by SIGSEGV (signal 11)".
pub fn describe_status(status: ExitStatus) -> String {
    if let Some(code) = status.code() {
        format!("exited with code {code}")
    } else if let Some(sig) = status.signal() {
        format!("was killed by {} (signal {sig})", signal_name(sig))
    } else {
        format!("ended with {status}")
    }
}

/// The conventional name of a signal number.
pub fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        _ => "an unknown signal",
    }
}

/// The last [`TAIL_BYTES`] of a stream, starting at a line boundary where possible.
fn tail(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    if text.len() <= TAIL_BYTES {
        return text.into_owned();
    }
    let mut start = text.len() - TAIL_BYTES;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    let cut = &text[start..];
    let cut = cut.find('\n').map_or(cut, |i| &cut[i + 1..]);
    format!("[...]\n{cut}")
}

/// `s` as one word of a shell command line: as it is where that is safe, else in single
/// quotes.
pub fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {

    /// A dropped server's child is killed at once and reaped (no zombie, no orphan), without
    /// the drop waiting for it; `finish` lets a child that exits on its stdin's end do so, and
    /// kills one that does not within the limit.
    #[test]
    fn a_dropped_server_is_killed_and_reaped_and_finish_waits_a_bounded_time() {
        let gone = |pid: u32| {
            let until = Instant::now() + Duration::from_secs(5);
            while Instant::now() < until {
                // A reaped child has no /proc entry; a zombie still has one.
                if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                    return true;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            false
        };
        // Ignores its stdin's end: only a kill ends it.
        let stubborn = r#"trap '' TERM; while :; do read -r l || sleep 0.05; [ -n "$l" ] && echo "got $l"; l=; done"#;
        let mut s = Cmd::new("sh").arg("-c").arg(stubborn).serve().unwrap();
        assert_eq!(s.request(b"x", Duration::from_secs(5)).unwrap(), b"got x");
        let pid = s.child().id();
        let t = Instant::now();
        drop(s);
        assert!(t.elapsed() < Duration::from_millis(500), "the drop waited");
        assert!(gone(pid), "a dropped server's child is killed and reaped");

        let mut s = Cmd::new("sh").arg("-c").arg(stubborn).serve().unwrap();
        let pid = s.child().id();
        let t = Instant::now();
        s.finish(Duration::from_millis(300));
        assert!(
            t.elapsed() >= Duration::from_millis(300),
            "finish gave it its time"
        );
        assert!(gone(pid), "finish kills what does not exit");

        let mut s = Cmd::new("sh")
            .arg("-c")
            .arg("while read -r l; do echo \"got $l\"; done")
            .serve()
            .unwrap();
        let pid = s.child().id();
        let t = Instant::now();
        s.finish(Duration::from_secs(5));
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "it exits when its stdin ends"
        );
        assert!(gone(pid));
    }

    /// A server answers line by line in one process; a request past its timeout kills it,
    /// and a server that ends without answering says how it ended.
    #[test]
    fn a_server_answers_times_out_and_ends() {
        let script = r#"while read -r l; do case "$l" in
            sleep) sleep 30 ;;
            die) echo dying >&2; exit 7 ;;
            noisy) echo "earlier job's output" >&2; echo "pid $$ noisy" ;;
            *) echo "pid $$ $l" ;;
        esac; done"#;
        let mut s = Cmd::new("sh").arg("-c").arg(script).serve().unwrap();
        let a = s.request(b"one", Duration::from_secs(5)).unwrap();
        let b = s.request(b"two", Duration::from_secs(5)).unwrap();
        let pid = |x: &[u8]| {
            String::from_utf8_lossy(x)
                .split(' ')
                .nth(1)
                .unwrap()
                .to_string()
        };
        assert!(a.ends_with(b" one") && b.ends_with(b" two"), "{a:?} {b:?}");
        assert_eq!(pid(&a), pid(&b), "one process answers both");
        let started = Instant::now();
        assert!(matches!(
            s.request(b"sleep", Duration::from_millis(300)),
            Err(ServerEnd::Timeout)
        ));
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(!s.alive());
        let mut s = Cmd::new("sh").arg("-c").arg(script).serve().unwrap();
        s.request(b"noisy", Duration::from_secs(5)).unwrap();
        // Let the stderr reader take the earlier request's line before the next request.
        std::thread::sleep(Duration::from_millis(100));
        match s.request(b"die", Duration::from_secs(5)) {
            Err(ServerEnd::Ended { status, stderr }) => {
                assert_eq!(status.code(), Some(7));
                let stderr = String::from_utf8_lossy(&stderr);
                assert!(stderr.contains("dying"), "{stderr}");
                // A failure quotes its own request's stderr, not an earlier one's.
                assert!(!stderr.contains("earlier job"), "{stderr}");
            }
            other => panic!("{other:?}"),
        }
    }

    use super::*;

    #[test]
    fn a_lowered_thread_is_niced_and_its_children_too() {
        let seen = std::thread::spawn(|| {
            lower_this_threads_priority();
            // SAFETY: plain system calls on the calling thread.
            let own = unsafe {
                *libc::__errno_location() = 0;
                libc::getpriority(
                    libc::PRIO_PROCESS,
                    libc::syscall(libc::SYS_gettid) as libc::id_t,
                )
            };
            let child = Cmd::new("sh")
                .args(["-c", "cut -d' ' -f19 /proc/self/stat"])
                .run();
            (
                own,
                child.map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string()),
            )
        })
        .join()
        .unwrap();
        assert_eq!(seen.0, SPECULATIVE_NICE);
        assert_eq!(seen.1.unwrap(), SPECULATIVE_NICE.to_string());
        // The test's own thread is untouched.
        // SAFETY: a plain system call.
        let main = unsafe {
            libc::getpriority(
                libc::PRIO_PROCESS,
                libc::syscall(libc::SYS_gettid) as libc::id_t,
            )
        };
        assert!(main < SPECULATIVE_NICE, "{main}");
    }

    #[test]
    fn captures_output_and_status() {
        let out = Cmd::new("sh")
            .args(["-c", "echo out; echo err >&2; exit 3"])
            .output()
            .unwrap();
        assert_eq!(out.stdout_str(), "out\n");
        assert_eq!(out.stderr_str(), "err\n");
        assert_eq!(out.status.code(), Some(3));
    }

    #[test]
    fn failure_names_command_code_and_tail() {
        let err = Cmd::new("sh")
            .args(["-c", "echo boom >&2; exit 7"])
            .run()
            .unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("`sh -c 'echo boom >&2; exit 7'` exited with code 7"),
            "{msg}"
        );
        assert!(msg.contains("boom"), "{msg}");
    }

    #[test]
    fn signal_is_named() {
        let err = Cmd::new("sh")
            .args(["-c", "kill -SEGV $$"])
            .run()
            .unwrap_err();
        assert!(err.to_string().contains("SIGSEGV"), "{err}");
    }

    #[test]
    fn timeout_kills_the_process_group() {
        let start = Instant::now();
        let err = Cmd::new("sh")
            .args(["-c", "sleep 30 & sleep 30; echo never"])
            .timeout(Duration::from_millis(200))
            .output()
            .unwrap_err();
        assert!(matches!(err, ProcessError::Timeout { .. }), "{err}");
        // The reader threads return only once every holder of the pipes (the backgrounded
        // sleep included) is gone, so a quick return proves the group was killed.
        assert!(start.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn a_backgrounded_grandchild_does_not_hold_us() {
        let start = Instant::now();
        let out = Cmd::new("sh")
            .args(["-c", "sleep 4 & echo hi"])
            .timeout(Duration::from_secs(1))
            .output()
            .unwrap();
        assert_eq!(out.stdout_str(), "hi\n");
        // Before the fix this took the full 4 s, waiting for `sleep` to close the pipe.
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "{:?}",
            start.elapsed()
        );
    }

    /// Whether process `pid` is still running (a zombie counts as gone).
    fn alive(pid: &str) -> bool {
        std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())).is_ok_and(|s| {
            s.rsplit_once(')')
                .is_some_and(|(_, r)| !r.trim_start().starts_with('Z'))
        })
    }

    fn wait_gone(pid: &str) -> bool {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(5) {
            if !alive(pid) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    #[test]
    fn a_timeout_is_kept_when_a_descendant_escapes_with_setsid() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("pid");
        let script = format!(
            "setsid sh -c 'echo $$ > {}; exec sleep 888' & sleep 30",
            pidfile.display()
        );
        let start = Instant::now();
        let err = Cmd::new("sh")
            .args(["-c", &script])
            .timeout(Duration::from_secs(2))
            .output()
            .unwrap_err();
        assert!(matches!(err, ProcessError::Timeout { .. }), "{err}");
        assert!(
            start.elapsed() < Duration::from_secs(7),
            "{:?}",
            start.elapsed()
        );
        let pid = std::fs::read_to_string(&pidfile).unwrap();
        assert!(wait_gone(&pid), "the escaped sleep {pid} still runs");
    }

    #[test]
    fn an_escaped_descendant_holding_the_pipe_does_not_hold_us_and_dies() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("pid");
        let script = format!(
            "setsid sh -c 'echo $$ > {}; exec sleep 888' & sleep 1; echo hi",
            pidfile.display()
        );
        let start = Instant::now();
        let out = Cmd::new("sh").args(["-c", &script]).output().unwrap();
        assert_eq!(out.stdout_str(), "hi\n");
        assert!(
            start.elapsed() < Duration::from_secs(7),
            "{:?}",
            start.elapsed()
        );
        let pid = std::fs::read_to_string(&pidfile).unwrap();
        assert!(wait_gone(&pid), "the escaped sleep {pid} still runs");
    }

    #[test]
    fn only_a_bounded_tail_of_output_is_kept() {
        let out = Cmd::new("sh")
            .args(["-c", "head -c 50000000 /dev/zero; printf END; echo err >&2"])
            .keep_tail(1000)
            .output()
            .unwrap();
        assert_eq!(out.stdout.len(), 1000);
        assert!(out.stdout.ends_with(b"END"));
        assert_eq!(out.stdout_dropped, 50_000_003 - 1000);
        assert_eq!(out.stderr_str(), "err\n");
        assert_eq!(out.stderr_dropped, 0);
    }

    #[test]
    fn missing_program_is_not_found() {
        let err = Cmd::new("repro-no-such-program").output().unwrap_err();
        assert!(matches!(err, ProcessError::NotFound { .. }));
    }

    #[test]
    fn stdin_is_fed() {
        let out = Cmd::new("cat")
            .stdin_bytes(b"hello".to_vec())
            .run()
            .unwrap();
        assert_eq!(out.stdout, b"hello");
    }

    #[test]
    fn long_output_is_cut_to_a_tail() {
        let t = tail("line\n".repeat(1000).as_bytes());
        assert!(t.starts_with("[...]\nline\n"));
        assert!(t.len() <= TAIL_BYTES + 10);
    }
}

/// A child that answers requests, one line in and one line out, until its stdin closes:
/// the reused GPU worker of a bisection. Its stdout is read line by line on a thread (so a
/// request can wait with a timeout), its stderr's last bytes are kept for a failure's tail,
/// and its process group is registered with the guardian like every other child's.
pub struct Server {
    argv: String,
    /// Taken only when the server is dropped (to be reaped on a thread of its own).
    child: Option<std::process::Child>,
    stdin: Option<std::process::ChildStdin>,
    lines: std::sync::mpsc::Receiver<Vec<u8>>,
    stderr: Arc<Mutex<Capture>>,
    _group: Group,
}

/// Why a [`Server`] gave no answer to a request. Either way it is gone: it was killed
/// (timeout) or it ended by itself (crash, exit), and the caller starts a new one.
#[derive(Debug)]
pub enum ServerEnd {
    /// No answer within the time limit: the child and its group were killed.
    Timeout,
    /// The child ended without answering: its status and the tail of its stderr.
    Ended {
        /// How it ended.
        status: ExitStatus,
        /// The last bytes of its stderr.
        stderr: Vec<u8>,
    },
}

/// At most this many bytes of one answer line: a GPU job's report is far smaller.
const SERVER_LINE_LIMIT: u64 = 256 << 20;

impl Cmd {
    /// Starts the command as a [`Server`] (stdin, stdout and stderr piped; any stdin bytes
    /// and timeout given to the command are ignored: each request has its own).
    pub fn serve(&self) -> Result<Server, ProcessError> {
        let argv = self.display();
        let mut command = self.command_unguarded();
        command.stdin(Stdio::piped());
        let mut child = command.spawn().map_err(|source| {
            if source.kind() == std::io::ErrorKind::NotFound {
                ProcessError::NotFound {
                    program: self.program.to_string_lossy().into_owned(),
                }
            } else {
                ProcessError::Spawn {
                    argv: argv.clone(),
                    source,
                }
            }
        })?;
        let group = Group::register(child.id());
        let stdin = child.stdin.take();
        let out = child.stdout.take().expect("stdout is piped");
        let mut err = child.stderr.take().expect("stderr is piped");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            let mut reader = std::io::BufReader::new(out);
            loop {
                let mut line = Vec::new();
                match (&mut reader)
                    .take(SERVER_LINE_LIMIT)
                    .read_until(b'\n', &mut line)
                {
                    Ok(0) | Err(_) => return,
                    Ok(_) if tx.send(line).is_err() => return,
                    Ok(_) => {}
                }
            }
        });
        let stderr = Arc::new(Mutex::new(Capture {
            bytes: Vec::new(),
            dropped: 0,
            ended: false,
        }));
        let keep = self.keep.min(TAIL_BYTES * 4);
        let sink = stderr.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    break;
                }
                let mut c = sink.lock().unwrap_or_else(|e| e.into_inner());
                c.push(&buf[..n], keep);
            }
        });
        Ok(Server {
            argv,
            child: Some(child),
            stdin,
            lines,
            stderr,
            _group: group,
        })
    }
}

impl Server {
    /// Sends `request` (one line; a newline is added) and waits at most `timeout` for one
    /// line of answer (returned without its newline). On [`ServerEnd`] the child is gone.
    pub fn request(&mut self, request: &[u8], timeout: Duration) -> Result<Vec<u8>, ServerEnd> {
        use std::io::Write;
        // The stderr a failure quotes is this request's: what earlier ones wrote (another
        // commit's kernel output, say) is dropped.
        {
            let mut c = self.stderr.lock().unwrap_or_else(|e| e.into_inner());
            c.bytes.clear();
            c.dropped = 0;
        }
        // A write error means the child is gone; what it said last, or how it ended, is
        // what the read below finds.
        if let Some(pipe) = self.stdin.as_mut() {
            let _ = pipe
                .write_all(request)
                .and_then(|()| pipe.write_all(b"\n"))
                .and_then(|()| pipe.flush());
        }
        match self.lines.recv_timeout(timeout) {
            Ok(mut line) if line.ends_with(b"\n") => {
                line.pop();
                Ok(line)
            }
            // A line cut off by the end of the stream or by the limit is no answer.
            Ok(_) | Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => Err(self.ended()),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                kill_tree(self.child());
                Err(ServerEnd::Timeout)
            }
        }
    }

    /// The child's end once its stdout closed: waited for (briefly), else killed.
    fn ended(&mut self) -> ServerEnd {
        let child = self.child();
        let status = match child.wait_timeout(DRAIN_LIMIT) {
            Ok(Some(s)) => s,
            _ => {
                kill_tree(child);
                child
                    .try_wait()
                    .ok()
                    .flatten()
                    .unwrap_or_else(|| ExitStatus::from_raw(libc::SIGKILL))
            }
        };
        // The stderr reader may still be copying the last bytes the child wrote.
        std::thread::sleep(Duration::from_millis(20));
        let stderr = self
            .stderr
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .bytes
            .clone();
        ServerEnd::Ended { status, stderr }
    }

    /// The child (present until the server is dropped).
    fn child(&mut self) -> &mut std::process::Child {
        self.child
            .as_mut()
            .expect("the child is taken only when the server is dropped")
    }

    /// Closes the child's stdin (its signal to finish) and waits at most `limit` for it
    /// to exit, then ends it with its group: for a server replaced by another that will use
    /// what this one releases as it exits (a GPU worker's context, on a GPU that may allow
    /// one context at a time).
    pub fn finish(mut self, limit: Duration) {
        self.stdin = None;
        let child = self.child();
        if !matches!(child.wait_timeout(limit), Ok(Some(_))) {
            kill_tree(child);
        }
    }

    /// Whether the child still runs (a server that ended between requests is replaced,
    /// not charged to the next request).
    pub fn alive(&mut self) -> bool {
        matches!(self.child().try_wait(), Ok(None))
    }

    /// The command line, for messages.
    pub fn display(&self) -> &str {
        &self.argv
    }
}

impl Drop for Server {
    /// Ends the child at once, with its group, and reaps it on a thread of its own: every
    /// request it took was answered or timed out, so nothing it would still do is wanted,
    /// and no worker outlives its caller. Its end is not waited for: a GPU worker's exit
    /// tears down its CUDA context (about 0.1 s), which its caller need not sit through
    /// (where something follows on the same GPU, [`Server::finish`] waits instead). The
    /// group is killed by `_group`'s drop, right after this; a child already reaped (it
    /// ended, or timed out) is not waited for again.
    fn drop(&mut self) {
        self.stdin = None;
        if let Some(mut child) = self.child.take()
            && matches!(child.try_wait(), Ok(None))
        {
            // The standard library's own wait, so the child is reaped once and only here.
            std::thread::spawn(move || {
                let _ = child.wait();
            });
        }
    }
}
