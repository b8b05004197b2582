//! The command supervisor: one small long-lived process per host that forks a shim for each
//! command, so that no command pays for an `exec` of the shim (DESIGN §6; ARCHITECTURE.md,
//! "Measured", says why: on this kind of machine an `exec` costs more than a millisecond).
//!
//! The host starts it once (`hotsh-shim __supervisor BUILD LIFELINE_FD CONTROL_FD`, or
//! `hotsh __supervisor …` where `hotsh-shim` is missing) with an empty environment, in `/`; it
//! makes itself a session of its own. CONTROL_FD is one end of a `SOCK_SEQPACKET` socket pair.
//! The supervisor keeps one *spare* shim forked ahead of time, which reads the socket itself:
//! the host sends a [`Job`] as one message with four descriptors (the command's stdin, stdout,
//! stderr and the status pipe's write end; a job over [`INLINE_MAX`] comes in a memory file,
//! a fifth); the spare answers with its pid and a pidfd for itself, tells the supervisor (a
//! byte on its own channel), puts the pipes on 0, 1 and 2 and runs the command
//! ([`shim::Shim::run`]). The supervisor forks the next spare [`SPARE_DELAY`] later, or at once
//! when a job waits and there is none. How the command ended comes to the host through the
//! status pipe, not through the supervisor, so the host waits for nothing it cannot see.
//!
//! The supervisor is a child subreaper: if a command kills its shim, what the shim leaves
//! behind comes to the supervisor, which kills it. It stops taking jobs when the host closes
//! the socket or the lifeline ends, and exits once it has no child left. If it dies (a command
//! can kill it: it runs as the same user), its shims are re-parented to the host, which kills
//! them as strangers; the host starts a new supervisor for the next command. A SIGCONT (the
//! host's nudge when no answer comes) is passed on to the spare.
//!
//! The supervisor must stay single-threaded: its forks run Rust code without an `exec`.

use super::process::{self, Pidfd, SignalFd};
use super::shim::{self, BUILD, Job, StatusPipe};
use crate::fds::{JOB_FDS, recv_with_fds, send_with_fds};
use crate::sandbox::Policy;
use crate::sync::lock;
use std::collections::BTreeSet;
use std::ffi::OsString;
use std::io::Read as _;
use std::os::fd::{AsFd as _, AsRawFd as _, BorrowedFd, FromRawFd as _, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt as _, OsStringExt as _};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt as _;
use std::process::Stdio;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The hidden subcommand.
pub(crate) const SUBCOMMAND: &str = "__supervisor";

/// A job's frame larger than this is refused (the command, its arguments and environment).
const MAX_FRAME: usize = 64 << 20;

/// A frame up to this size goes in one message; a larger one in a memory file sent along
/// (the socket's buffer bounds a message), the message then saying [`IN_FILE`].
const INLINE_MAX: usize = 32 << 10;
const IN_FILE: &[u8] = b"FILE";

/// How long after a spare took a job the supervisor forks the next one: not at once, when
/// the fork would take a core from the shim that starts the command (two cores here), but
/// while the command runs, when the host is idle.
const SPARE_DELAY: Duration = Duration::from_micros(500);

/// How long the host waits for the supervisor to answer before it sends SIGCONT (a command
/// may have stopped it), and before it gives the supervisor up.
const NUDGE_AFTER: Duration = Duration::from_millis(100);
const GIVE_UP_AFTER: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------------------------
// The wire: a job is a frame of length-prefixed byte strings; the answer is eight bytes.

/// The frame for `job`: its length (u32, little-endian), then each field as a length-prefixed
/// byte string.
fn encode(job: &Job) -> Vec<u8> {
    fn put(frame: &mut Vec<u8>, bytes: &[u8]) {
        frame.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        frame.extend_from_slice(bytes);
    }
    let policy = job.policy.as_ref().and_then(|p| serde_json::to_string(p).ok());
    let mut frame = vec![0; 4];
    put(&mut frame, job.grace.as_millis().to_string().as_bytes());
    put(&mut frame, policy.as_deref().unwrap_or("-").as_bytes());
    put(&mut frame, job.shell.as_bytes());
    put(&mut frame, job.command.as_bytes());
    put(&mut frame, job.workdir.as_bytes());
    put(&mut frame, job.positional.len().to_string().as_bytes());
    for arg in &job.positional {
        put(&mut frame, arg.as_bytes());
    }
    put(&mut frame, job.env.len().to_string().as_bytes());
    for (key, value) in &job.env {
        put(&mut frame, key.as_bytes());
        put(&mut frame, value.as_bytes());
    }
    let length = (frame.len() - 4) as u32;
    frame[..4].copy_from_slice(&length.to_le_bytes());
    frame
}

/// The job in a frame's body (without its length).
fn decode(body: &[u8]) -> Result<Job, String> {
    let mut fields = Fields(body);
    let grace = Duration::from_millis(fields.number("the grace period")? as u64);
    let policy = match fields.next()?.to_str() {
        Some("-") => None,
        Some(json) => Some(
            serde_json::from_str::<Policy>(json)
                .map_err(|e| format!("the sandbox policy is not valid: {e}"))?,
        ),
        None => return Err("the sandbox policy is not UTF-8".into()),
    };
    let (shell, command, workdir) = (fields.next()?, fields.next()?, fields.next()?);
    let positional = (0..fields.number("the argument count")?)
        .map(|_| fields.next())
        .collect::<Result<_, _>>()?;
    let env = (0..fields.number("the variable count")?)
        .map(|_| Ok((fields.next()?, fields.next()?)))
        .collect::<Result<_, String>>()?;
    Ok(Job { grace, policy, shell, command, positional, env, workdir })
}

/// The length-prefixed fields of a frame, in order.
struct Fields<'a>(&'a [u8]);

impl Fields<'_> {
    fn next(&mut self) -> Result<OsString, String> {
        let (length, after) = self.0.split_first_chunk::<4>().ok_or("the job is cut short")?;
        let length = u32::from_le_bytes(*length) as usize;
        let field = after.get(..length).ok_or("the job is cut short")?;
        self.0 = &after[length..];
        Ok(OsString::from_vec(field.to_vec()))
    }

    fn number(&mut self, what: &str) -> Result<usize, String> {
        let text = self.next()?;
        text.to_str().and_then(|t| t.parse().ok()).ok_or(format!("{what} is not a number"))
    }
}

// ---------------------------------------------------------------------------------------------
// The supervisor process.

/// A line on the supervisor's stderr (the agent's): lost, not a panic, when nobody reads it
/// any more (`eprintln!` panics on a broken pipe, which here would skip what follows it: a
/// kill, an answer to the host).
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// Entry point of `__supervisor`; never returns.
pub(crate) fn main(args: &[OsString]) -> ! {
    let (build, lifeline, control, environment) = match args {
        [build, lifeline, control] => (build, lifeline, control, None),
        [build, lifeline, control, policy] => (build, lifeline, control, Some(policy)),
        _ => {
            say!(
                "hotsh __supervisor: usage: hotsh __supervisor BUILD LIFELINE_FD CONTROL_FD [POLICY]"
            );
            std::process::exit(2);
        }
    };
    // For a session's sandbox environment: the policy it was made for.
    let environment: Option<Policy> =
        environment.map(|policy| match policy.to_str().map(serde_json::from_str) {
            Some(Ok(policy)) => policy,
            _ => fail("the sandbox environment's policy is not valid"),
        });
    if build != BUILD {
        fail(&format!(
            "this supervisor is from hotsh {BUILD}, but the agent is hotsh {}; no command will \
             run: reinstall hotsh so that {} beside it comes from the same build",
            build.to_string_lossy(),
            shim::PROGRAM,
        ));
    }
    let descriptor = |arg: &OsString| arg.to_str().and_then(|fd| fd.parse::<RawFd>().ok());
    let (Some(lifeline), Some(control)) = (descriptor(lifeline), descriptor(control)) else {
        fail("the lifeline and the control socket must be descriptor numbers");
    };
    // Nothing but the two: a descriptor the host's own parent left open must reach no shim.
    process::close_inherited(&[lifeline, control], process::Inherited::Close);
    // SAFETY: plain libc calls on this single-threaded process with valid arguments.
    unsafe {
        libc::fcntl(lifeline, libc::F_SETFD, libc::FD_CLOEXEC);
        libc::fcntl(control, libc::F_SETFD, libc::FD_CLOEXEC);
        // A session of its own, without a controlling terminal: no shim can reach the
        // terminal hotsh runs in, nor get its Ctrl-C.
        libc::setsid();
        // The host ignores SIGXFSZ for itself; commands get the usual behaviour.
        libc::signal(libc::SIGXFSZ, libc::SIG_DFL);
    }
    // Like the host: another process of the user cannot read this one's memory.
    let _ = process::become_undumpable();
    // Its name in `ps` and `/proc/PID/comm` (exec'd as `/proc/self/fd/N`, it would be N).
    process::set_name(c"hotsh-supervise");
    if let Err(error) = process::become_subreaper() {
        fail(&format!("cannot become a child subreaper: {error}"));
    }
    // SAFETY: the host passed this descriptor for the supervisor to own.
    let control = unsafe { OwnedFd::from_raw_fd(control) };
    if let Some(policy) = &environment {
        // Under Landlock the environment is this process: confined once, here, and every
        // shim it forks inherits it (bwrap did the same before starting it).
        if policy.bwrap.is_none()
            && let Err(error) = crate::sandbox::confine::restrict_self(policy)
        {
            fail(&format!("the sandbox cannot be enforced: {error}"));
        }
        greet_host(control.as_fd(), policy.bwrap.is_some());
    }
    // Ignored for itself, blocked and read: only the host's socket and lifeline end it.
    // SIGCONT (the host's nudge when no answer comes) is read too, to pass on to the spare: a
    // command may have stopped either.
    let watched = [libc::SIGCHLD, libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGCONT];
    let signals = match SignalFd::new(&watched) {
        Ok(fd) => fd,
        Err(error) => fail(&format!("cannot watch signals: {error}")),
    };
    // Compiled once here, before any fork: every shim's command gets them as they are.
    let _ = crate::sandbox::notify::programs(crate::sandbox::notify::Filters {
        connect: true,
        names: true,
    });
    let mut shims = BTreeSet::new();
    let mut spare: Option<Spare> = None;
    // When to fork the next spare: at once at start, a moment after each job (SPARE_DELAY).
    let mut spare_due = Some(Instant::now());
    let mut taking_jobs = true;
    loop {
        if taking_jobs && spare.is_none() && spare_due.is_some_and(|due| due <= Instant::now()) {
            spare = fork_spare(lifeline, &control, &signals, environment.as_ref()).ok();
            shims.extend(spare.as_ref().map(|s| s.pid));
            spare_due = None;
        }
        let timeout_ms = spare_due.map_or(-1, |due| {
            due.saturating_duration_since(Instant::now()).as_millis().min(1000) as i32
        });
        // The spare reads the jobs; the supervisor looks at the socket only when there is no
        // spare (a job waiting, or the host gone).
        let (job_fd, job_events) = match (&spare, taking_jobs) {
            (Some(spare), true) => (spare.channel.as_raw_fd(), libc::POLLIN),
            (None, true) => (control.as_raw_fd(), libc::POLLIN),
            (_, false) => (-1, 0),
        };
        let mut fds = [
            libc::pollfd { fd: signals.fd, events: libc::POLLIN, revents: 0 },
            // Once it has ended, the lifeline stays readable: no longer watched.
            libc::pollfd {
                fd: if taking_jobs { lifeline } else { -1 },
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd { fd: job_fd, events: job_events, revents: 0 },
        ];
        // SAFETY: `fds` holds three valid pollfd (a negative fd is ignored).
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), 3, timeout_ms) };
        if ready < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            fail(&format!("poll failed: {}", std::io::Error::last_os_error()));
        }
        if fds[0].revents != 0 {
            if signals.read().contains(&libc::SIGCONT)
                && let Some(spare) = &spare
            {
                // SAFETY: our own unreaped child (it is reaped only on SIGCHLD, below).
                unsafe { libc::kill(spare.pid, libc::SIGCONT) };
            }
            reap_and_sweep(&mut shims);
        }
        if taking_jobs && fds[1].revents != 0 {
            // The host is gone; each shim sees the same end and stops its command.
            taking_jobs = false;
        }
        if taking_jobs && fds[2].revents != 0 {
            if let Some(ended) = spare.take() {
                // The spare took a job (a byte), or ended (the host closed the socket, or it
                // was killed): either way it is a spare no more. Once the host closed the
                // socket, no spare is forked again: the supervisor winds down.
                if !ended.took_job() && host_closed(&control) {
                    taking_jobs = false;
                } else {
                    spare_due = Some(Instant::now() + SPARE_DELAY);
                }
            } else if fds[2].revents & libc::POLLIN != 0 {
                // A job and no spare (the last one is being used, or a fork failed): fork now.
                spare = fork_spare(lifeline, &control, &signals, environment.as_ref())
                    .inspect_err(|&errno| refuse_job(control.as_fd(), errno))
                    .ok();
                shims.extend(spare.as_ref().map(|s| s.pid));
                spare_due = None;
            } else {
                // The host closed the socket.
                taking_jobs = false;
            }
        }
        if !taking_jobs {
            spare_due = None;
            if let Some(idle) = spare.take() {
                // SAFETY: our own unreaped child; it has no command (or is starting one, which
                // its shim's lifeline ends anyway).
                unsafe { libc::kill(idle.pid, libc::SIGKILL) };
            }
            reap_and_sweep(&mut shims);
            if shims.is_empty() && shim::children().is_empty() {
                std::process::exit(0);
            }
        }
    }
}

/// Whether the host closed its end of the job socket (no job waits and none will come).
fn host_closed(control: &OwnedFd) -> bool {
    let mut fds = [libc::pollfd { fd: control.as_raw_fd(), events: libc::POLLIN, revents: 0 }];
    // SAFETY: one valid pollfd; no wait.
    let ready = unsafe { libc::poll(fds.as_mut_ptr(), 1, 0) };
    ready > 0 && fds[0].revents & libc::POLLHUP != 0
}

fn fail(message: &str) -> ! {
    say!("hotsh __supervisor: {message}");
    std::process::exit(125);
}

/// Reaps every child that has ended, and kills every child that is not a shim (what a killed
/// shim left behind); those are reaped on their own SIGCHLD.
fn reap_and_sweep(shims: &mut BTreeSet<libc::pid_t>) {
    loop {
        let mut status = 0;
        // SAFETY: a non-blocking wait with a valid out pointer.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            break;
        }
        shims.remove(&pid);
    }
    for child in shim::children() {
        if !shims.contains(&child) {
            say!(
                "hotsh supervisor: a process was re-parented to the supervisor (its shim was \
                 killed); killing it"
            );
            // SAFETY: our own unreaped child, so the pid cannot have been recycled.
            unsafe { libc::kill(child, libc::SIGKILL) };
        }
    }
}

/// A job as the spare receives it: the frame (its length included) and the four pipes.
type Received = (Vec<u8>, Vec<OwnedFd>);

/// Reads one job; `None` at end of file (the host closed the socket). A frame too large for
/// one message comes in a memory file, the fifth descriptor.
fn receive(control: BorrowedFd<'_>) -> std::io::Result<Option<Received>> {
    let mut message = vec![0u8; INLINE_MAX];
    let (received, mut fds) = recv_with_fds(control, &mut message)?;
    if received.bytes == 0 {
        return Ok(None);
    }
    if received.flags.contains(rustix::net::ReturnFlags::TRUNC) {
        return Err(std::io::Error::other("a job was cut short"));
    }
    message.truncate(received.bytes);
    if message == IN_FILE && fds.len() == JOB_FDS + 1 {
        use std::io::{Seek as _, SeekFrom};
        let mut file = std::fs::File::from(fds.pop().expect("five descriptors"));
        file.seek(SeekFrom::Start(0))?;
        message.clear();
        file.take(MAX_FRAME as u64 + 4).read_to_end(&mut message)?;
    }
    if fds.len() != JOB_FDS {
        return Err(std::io::Error::other(format!("a job came with {} descriptors", fds.len())));
    }
    let length = message.first_chunk::<4>().map(|l| u32::from_le_bytes(*l) as usize);
    if length != Some(message.len().saturating_sub(4)) {
        return Err(std::io::Error::other("a job's length does not match its frame"));
    }
    Ok(Some((message, fds)))
}

/// Sends the host the answer to its job: the pid (or 0) and an error number, with a pidfd
/// when the kernel has them.
fn answer_host(control: BorrowedFd<'_>, answer: Result<libc::pid_t, i32>) {
    let (pid, errno) = match answer {
        Ok(pid) => (pid, 0),
        Err(errno) => (0, errno),
    };
    let mut bytes = [0u8; 8];
    bytes[..4].copy_from_slice(&pid.to_le_bytes());
    bytes[4..].copy_from_slice(&errno.to_le_bytes());
    let pidfd = (pid > 0).then(|| Pidfd::open(pid as u32).ok()).flatten();
    let fds: Vec<BorrowedFd<'_>> = pidfd.iter().map(|p| p.as_fd()).collect();
    // A host that is gone reads nothing; the lifeline ends everything then.
    let _ = send_with_fds(control, &bytes, &fds);
}

/// In an environment, tells the host it is up and confined (the host sends no job before): a
/// pidfd for this supervisor, to nudge it and see it end, and inside bwrap one for the
/// namespace's init (this process's parent), the one process whose death ends everything in
/// the namespace: the host kills it to end the environment. Pids mean nothing outside the
/// namespace; pidfds do.
fn greet_host(control: BorrowedFd<'_>, in_bwrap: bool) {
    let own = Pidfd::open(std::process::id());
    let init = if in_bwrap { Pidfd::open(1).map(Some) } else { Ok(None) };
    let (Ok(own), Ok(init)) = (own, init) else {
        fail("cannot open pidfds for the host; the sandbox environment is not used");
    };
    let fds: Vec<BorrowedFd<'_>> =
        [Some(own.as_fd()), init.as_ref().map(|i| i.as_fd())].into_iter().flatten().collect();
    if let Err(error) = send_with_fds(control, b"ready", &fds) {
        fail(&format!("cannot greet the host: {error}"));
    }
}

/// Takes the waiting job off the socket and answers that no shim could be forked for it.
fn refuse_job(control: BorrowedFd<'_>, errno: i32) {
    say!("hotsh supervisor: cannot fork a shim: {}", std::io::Error::from_raw_os_error(errno));
    if let Ok(Some(_)) = receive(control) {
        answer_host(control, Err(errno));
    }
}

/// A shim forked before its job, reading the host's socket itself: neither the fork nor a
/// hand-over through the supervisor is on the path of the command that uses it. It writes a
/// byte on its channel when it has taken a job.
struct Spare {
    pid: libc::pid_t,
    channel: UnixStream,
}

impl Spare {
    /// Whether it took a job (it writes one byte then), once its channel is readable; false
    /// when it ended without one.
    fn took_job(&self) -> bool {
        let mut byte = [0u8; 1];
        matches!(std::io::Read::read(&mut (&self.channel), &mut byte), Ok(1))
    }
}

/// Forks a spare shim. The answer is the error of `fork` if it fails.
fn fork_spare(
    lifeline: RawFd,
    control: &OwnedFd,
    signals: &SignalFd,
    environment: Option<&Policy>,
) -> Result<Spare, i32> {
    let errno = |e: std::io::Error| e.raw_os_error().unwrap_or(libc::EIO);
    let (channel, theirs) = UnixStream::pair().map_err(errno)?;
    // SAFETY: this process is single-threaded, so the fork may run any code.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(errno(std::io::Error::last_os_error()));
    }
    if pid > 0 {
        drop(theirs);
        return Ok(Spare { pid, channel });
    }
    // SAFETY: the fork closes the supervisor's descriptors it must not hold (they belong to
    // the supervisor's frame, which this fork never returns to).
    unsafe {
        libc::close(signals.fd);
        libc::close(channel.as_raw_fd());
        // A process group of its own, as the host signals it alone.
        libc::setpgid(0, 0);
    }
    process::set_name(c"hotsh-shim");
    std::mem::forget(channel);
    let prepared = shim::Shim::prepare();
    // Copies now (copy-on-write) the heap pages the job will write, while no command waits.
    drop(std::hint::black_box(vec![1u8; 96 << 10]));
    let (frame, pipes) = match receive(control.as_fd()) {
        Ok(Some(job)) => job,
        // The host closed the socket: nothing to do.
        Ok(None) => std::process::exit(0),
        Err(error) => {
            // A job that cannot be read is answered, so the host does not wait for it.
            say!("hotsh supervisor: a job could not be read: {error}");
            answer_host(control.as_fd(), Err(libc::EINVAL));
            let _ = std::io::Write::write_all(&mut (&theirs), b"!");
            std::process::exit(0);
        }
    };
    // SAFETY: getpid cannot fail.
    answer_host(control.as_fd(), Ok(unsafe { libc::getpid() }));
    // SAFETY: this fork's own copy of the socket, no longer needed.
    unsafe { libc::close(control.as_raw_fd()) };
    let _ = std::io::Write::write_all(&mut (&theirs), b"!");
    drop(theirs);
    let [stdin, stdout, stderr, status]: [OwnedFd; JOB_FDS] =
        pipes.try_into().unwrap_or_else(|_| std::process::exit(125));
    // SAFETY: dup2 onto 0..2 (which clears close-on-exec there); the originals close when
    // their OwnedFd drop.
    unsafe {
        libc::dup2(stdin.as_raw_fd(), 0);
        libc::dup2(stdout.as_raw_fd(), 1);
        libc::dup2(stderr.as_raw_fd(), 2);
    }
    drop((stdin, stdout, stderr));
    let report = StatusPipe::new(status);
    match (prepared, decode(&frame[4..])) {
        (Ok(shim), Ok(job)) => shim.run(job, lifeline, report, environment),
        (Err(error), _) => report.fail(&error),
        (_, Err(error)) => report.fail(&format!("the command could not be read: {error}")),
    }
}

// ---------------------------------------------------------------------------------------------
// The host's side.

/// A shim the supervisor started: its pid as the host sees it (`None` when it is not known,
/// inside an environment without a pidfd for it) and a pidfd for it.
#[derive(Debug)]
pub(crate) struct Started {
    pub(crate) pid: Option<u32>,
    pub(crate) pidfd: Option<Pidfd>,
}

/// The host's handle on a supervisor: started on first use (or ahead of it, by
/// [`Supervisor::warm_up`]), started again when it died. The host's own runs unconfined;
/// one for a session's sandbox environment ([`Supervisor::in_environment`]) runs inside a
/// bwrap started for it or confines itself (Landlock), and forks shims already confined.
#[derive(Debug)]
pub(crate) struct Supervisor {
    program: std::sync::Arc<shim::Program>,
    lifeline: RawFd,
    /// The policy of the environment it runs in; `None` for the host's own.
    environment: Option<Policy>,
    running: Mutex<Option<Running>>,
}

#[derive(Debug)]
struct Running {
    /// The supervisor, or for an environment, bubblewrap (which started it).
    child: std::process::Child,
    /// The supervisor's.
    pidfd: Option<Pidfd>,
    /// The environment's init: killing it ends every process in the environment.
    init: Option<Pidfd>,
    /// A `SOCK_SEQPACKET` pair's end: one message per job, read whole by one spare.
    socket: OwnedFd,
}

/// Why a job did not start.
enum Failure {
    /// The supervisor is gone or did not read the job: it may be started again and the job
    /// sent again.
    NotSent(std::io::Error),
    /// The job may have started (the supervisor died or hung after reading it): not sent again.
    Unknown(std::io::Error),
    /// The supervisor answered that it could not fork.
    Refused(std::io::Error),
}

impl Supervisor {
    pub(crate) fn new(lifeline: RawFd) -> Self {
        Self {
            program: std::sync::Arc::new(shim::Program::find()),
            lifeline,
            environment: None,
            running: Mutex::new(None),
        }
    }

    /// A supervisor for a sandbox environment under `policy`, from the same program as this
    /// one; started on first use or by [`Supervisor::warm_up`].
    pub(crate) fn in_environment(&self, policy: Policy) -> Self {
        Self {
            program: std::sync::Arc::clone(&self.program),
            lifeline: self.lifeline,
            environment: Some(policy),
            running: Mutex::new(None),
        }
    }

    /// Starts the supervisor now, if it is not running, so that the first command does not
    /// wait for it. Blocking.
    pub(crate) fn warm_up(&self) {
        let mut running = lock(&self.running);
        if running.is_none() {
            match self.launch() {
                Ok(started) => *running = Some(started),
                Err(error) => tracing::warn!(%error, "cannot start the command supervisor"),
            }
        }
    }

    /// Starts the shim for `job` with `pipes` (stdin, stdout, stderr, the status pipe's write
    /// end). Blocking, for well under a millisecond when the supervisor is running.
    pub(crate) fn start(
        &self,
        job: &Job,
        pipes: [BorrowedFd<'_>; JOB_FDS],
    ) -> std::io::Result<Started> {
        self.try_start(job, pipes).map_err(|error| match error {
            StartError::Launch(error) | StartError::Job(error) => error,
        })
    }

    /// [`Self::start`], telling a supervisor that could not be started (nothing was sent)
    /// from a job that failed.
    pub(crate) fn try_start(
        &self,
        job: &Job,
        pipes: [BorrowedFd<'_>; JOB_FDS],
    ) -> Result<Started, StartError> {
        let frame = encode(job);
        if frame.len() > MAX_FRAME {
            return Err(StartError::Job(std::io::Error::other(format!(
                "the command, its arguments and environment take {} bytes; the limit is {} MiB",
                frame.len(),
                MAX_FRAME >> 20
            ))));
        }
        let mut running = lock(&self.running);
        // A supervisor that has died is replaced before the job is sent.
        if running.as_ref().is_some_and(|r| r.pidfd.as_ref().is_some_and(|p| p.has_exited())) {
            tracing::warn!("the command supervisor has died; starting a new one");
            end(running.take());
        }
        let mut last_error = None;
        for _ in 0..2 {
            if running.is_none() {
                *running = Some(self.launch().map_err(StartError::Launch)?);
            }
            let Some(current) = running.as_ref() else { continue };
            match current.send(&frame, pipes) {
                Ok(started) => return Ok(self.seen_from_host(started)),
                Err(Failure::Refused(error)) => return Err(StartError::Job(error)),
                Err(Failure::Unknown(error)) => {
                    end(running.take());
                    return Err(StartError::Job(std::io::Error::other(format!(
                        "the command supervisor did not answer ({error}); it was replaced, and \
                         the command, if it had started, was stopped with it"
                    ))));
                }
                Err(Failure::NotSent(error)) => {
                    tracing::warn!(%error, "the command supervisor is gone; starting a new one");
                    end(running.take());
                    last_error = Some(error);
                }
            }
        }
        let error = last_error.unwrap_or_else(|| std::io::Error::other("no supervisor"));
        Err(StartError::Launch(std::io::Error::other(format!(
            "the command supervisor ({} beside hotsh, or hotsh itself) ends as soon as it starts \
             ({error}); its reason is in the agent's log",
            shim::PROGRAM
        ))))
    }

    /// `started` with its pid as the host sees it: inside a bwrap environment the supervisor
    /// answers with the namespace's pid, which the pidfd translates.
    fn seen_from_host(&self, started: Started) -> Started {
        if self.environment.as_ref().is_none_or(|policy| policy.bwrap.is_none()) {
            return started;
        }
        let pid = started.pidfd.as_ref().and_then(Pidfd::host_pid);
        Started { pid, pidfd: started.pidfd }
    }

    /// Whether it has been started and has ended since (what it ran ended with it, for an
    /// environment): it is reaped.
    pub(crate) fn ended(&self) -> bool {
        let mut running = lock(&self.running);
        let gone =
            running.as_ref().is_some_and(|r| r.pidfd.as_ref().is_some_and(Pidfd::has_exited));
        if gone {
            end(running.take());
        }
        gone
    }

    /// Stops taking jobs without waiting: the supervisor exits once its shims have ended
    /// (see [`Self::ended`]); what is running goes on to its end.
    pub(crate) fn stop_taking_jobs(&self) {
        if let Some(running) = lock(&self.running).as_ref() {
            let _ = rustix::net::shutdown(&running.socket, rustix::net::Shutdown::Both);
        }
    }

    /// Closes the socket (the supervisor stops taking jobs and exits once its shims are gone)
    /// and reaps the supervisor if it ends within `within`; kills it otherwise.
    pub(crate) fn close(&self, within: Duration) {
        let Some(mut running) = lock(&self.running).take() else { return };
        let _ = rustix::net::shutdown(&running.socket, rustix::net::Shutdown::Both);
        let ended = running.pidfd.as_ref().is_none_or(|p| p.wait_exit(within));
        if !ended {
            running.kill();
        }
        let _ = running.child.wait();
        process::reaped(Some(running.child.id()));
    }

    fn launch(&self) -> std::io::Result<Running> {
        let (socket, theirs) = rustix::net::socketpair(
            rustix::net::AddressFamily::UNIX,
            rustix::net::SocketType::SEQPACKET,
            process::SOCKET_FLAGS,
            None,
        )?;
        let theirs_fd = theirs.as_raw_fd();
        let args = [
            OsString::from(SUBCOMMAND),
            BUILD.into(),
            self.lifeline.to_string().into(),
            theirs_fd.to_string().into(),
        ];
        let policy = match &self.environment {
            Some(policy) => Some(serde_json::to_string(policy).map_err(std::io::Error::other)?),
            None => None,
        };
        // The program itself, or for a bwrap environment, bwrap running the program through
        // a descriptor it passes on.
        let bwrap = self.environment.as_ref().and_then(|policy| {
            crate::sandbox::confine::bwrap_argv(
                policy,
                crate::sandbox::confine::Lifetime::Environment,
            )
        });
        let (mut command, program) = match bwrap {
            None => {
                let mut command = std::process::Command::new(&self.program.path);
                command.arg0(&self.program.name);
                (command, None)
            }
            Some(bwrap) => {
                let program = std::fs::File::open(&self.program.path)?;
                let mut command = std::process::Command::new(&bwrap[0]);
                command.args(&bwrap[1..]).arg(process::descriptor_path(program.as_raw_fd()));
                (command, Some(program))
            }
        };
        command.args(args).args(policy);
        let program_fd = program.as_ref().map_or(-1, |file| file.as_raw_fd());
        command.env_clear().current_dir("/").stdin(Stdio::null()).stdout(Stdio::null());
        // SAFETY: fcntl is async-signal-safe; it makes the socket's end (and the program, for
        // bwrap to pass on) inheritable in this child only (a fork, once per supervisor,
        // rather than a posix_spawn).
        unsafe {
            command.pre_exec(move || {
                for fd in [theirs_fd, program_fd] {
                    if fd >= 0 && libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        #[expect(clippy::disallowed_methods, reason = "the executor is where processes start")]
        let mut child = process::spawn_own(|| command.spawn(), |c| Some(c.id()))?;
        drop((theirs, program));
        if self.environment.is_none() {
            let pidfd = Pidfd::open(child.id()).ok();
            tracing::debug!(pid = child.id(), program = %self.program.path.display(), "command supervisor started");
            return Ok(Running { child, pidfd, init: None, socket });
        }
        let in_bwrap = self.environment.as_ref().is_some_and(|p| p.bwrap.is_some());
        match greeting(&socket, &child, in_bwrap) {
            Ok((pidfd, init)) => {
                tracing::debug!(child = child.id(), in_bwrap, "sandbox environment started");
                Ok(Running { child, pidfd: Some(pidfd), init, socket })
            }
            Err(error) => {
                let _ = child.kill();
                let _ = child.wait();
                process::reaped(Some(child.id()));
                Err(std::io::Error::other(format!(
                    "the sandbox environment did not start ({error}); its reason is in the \
                     agent's log"
                )))
            }
        }
    }
}

/// Why [`Supervisor::try_start`] failed.
#[derive(Debug)]
pub(crate) enum StartError {
    /// The supervisor (or its environment) could not be started: no job was sent.
    Launch(std::io::Error),
    /// The job was refused, or may have started and was stopped.
    Job(std::io::Error),
}

/// Waits for an environment's supervisor to say it is up (see `greet_host`): its pidfd and,
/// inside bwrap, the namespace init's. Fails if the child (bwrap, or the supervisor itself)
/// ends first or nothing comes in [`GIVE_UP_AFTER`].
fn greeting(
    socket: &OwnedFd,
    child: &std::process::Child,
    in_bwrap: bool,
) -> std::io::Result<(Pidfd, Option<Pidfd>)> {
    let bwrap = Pidfd::open(child.id())?;
    let deadline = Instant::now() + GIVE_UP_AFTER;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "no answer"));
        }
        let mut fds = [
            libc::pollfd { fd: socket.as_raw_fd(), events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: bwrap.as_fd().as_raw_fd(), events: libc::POLLIN, revents: 0 },
        ];
        // SAFETY: two valid pollfd.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), 2, left.as_millis() as i32) };
        if ready < 0 {
            let error = std::io::Error::last_os_error();
            if error.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(error);
        }
        if fds[0].revents & libc::POLLIN != 0 {
            let mut bytes = [0u8; 8];
            let (received, fds) = recv_with_fds(socket.as_fd(), &mut bytes)?;
            let mut fds = fds.into_iter().map(Pidfd::from);
            return match (&bytes[..received.bytes], fds.next(), fds.next()) {
                (b"ready", Some(own), Some(init)) if in_bwrap => Ok((own, Some(init))),
                (b"ready", Some(own), None) if !in_bwrap => Ok((own, None)),
                // The socket closed: bwrap (or the supervisor) ended before it was up.
                (b"", None, None) => {
                    Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "it ended"))
                }
                _ => Err(std::io::Error::other("it answered something else")),
            };
        }
        if fds[0].revents != 0 || fds[1].revents != 0 {
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "it ended"));
        }
    }
}

impl Running {
    /// Ends it at once: for an environment its init, which takes every process in it along
    /// (bubblewrap's own end would leave them running); the child either way.
    fn kill(&mut self) {
        if let Some(init) = &self.init {
            init.signal(libc::SIGKILL);
        }
        let _ = self.child.kill();
    }

    fn send(&self, frame: &[u8], pipes: [BorrowedFd<'_>; JOB_FDS]) -> Result<Started, Failure> {
        // A large job goes in a memory file (the socket's buffer bounds one message).
        let file = if frame.len() > INLINE_MAX {
            Some(frame_file(frame).map_err(Failure::Refused)?)
        } else {
            None
        };
        let mut fds = pipes.to_vec();
        fds.extend(file.as_ref().map(|f| f.as_fd()));
        let message = if file.is_some() { IN_FILE } else { frame };
        // One message: it went whole, or not at all.
        send_with_fds(self.socket.as_fd(), message, &fds).map_err(Failure::NotSent)?;
        self.answer().map_err(Failure::Unknown)?
    }

    /// Waits for the supervisor's answer: a nudge (SIGCONT) if it is slow, an error if it never
    /// comes.
    fn answer(&self) -> std::io::Result<Result<Started, Failure>> {
        let start = Instant::now();
        for limit in [NUDGE_AFTER, GIVE_UP_AFTER] {
            if process::wait_readable(self.socket.as_raw_fd(), start + limit)? {
                return self.read_answer();
            }
            if let Some(pidfd) = &self.pidfd {
                pidfd.signal(libc::SIGCONT);
            }
        }
        Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no answer in {} s", GIVE_UP_AFTER.as_secs()),
        ))
    }

    fn read_answer(&self) -> std::io::Result<Result<Started, Failure>> {
        let mut bytes = [0u8; 8];
        let (received, fds) = recv_with_fds(self.socket.as_fd(), &mut bytes)?;
        let pidfd = fds.into_iter().next().map(Pidfd::from);
        if received.bytes != bytes.len() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the supervisor closed the socket",
            ));
        }
        let pid = i32::from_le_bytes(bytes[..4].try_into().unwrap_or_default());
        let errno = i32::from_le_bytes(bytes[4..].try_into().unwrap_or_default());
        Ok(if pid > 0 {
            Ok(Started { pid: Some(pid as u32), pidfd })
        } else {
            Err(Failure::Refused(std::io::Error::from_raw_os_error(errno)))
        })
    }
}

/// A memory file holding `frame`, for a job too large for one message.
fn frame_file(frame: &[u8]) -> std::io::Result<std::fs::File> {
    use std::io::Write as _;
    let mut file = process::anonymous_file(c"hotsh-job")?;
    file.write_all(frame)?;
    Ok(file)
}

/// Kills a supervisor given up on and reaps it. Its shims are re-parented to the host, which
/// kills them as strangers.
fn end(running: Option<Running>) {
    if let Some(mut running) = running {
        running.kill();
        let _ = running.child.wait();
        process::reaped(Some(running.child.id()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_survives_the_wire_byte_for_byte() {
        let job = Job {
            grace: Duration::from_millis(1500),
            policy: None,
            shell: "/bin/bash".into(),
            command: "echo 'ü' \"$0\"".into(),
            positional: vec![OsString::from_vec(vec![0xff, b'a']), "".into()],
            env: vec![
                ("A".into(), OsString::from_vec(vec![b'x', 0xfe])),
                ("EMPTY".into(), "".into()),
            ],
            workdir: "/tmp/a dir".into(),
        };
        let frame = encode(&job);
        let length = u32::from_le_bytes(frame[..4].try_into().expect("four bytes")) as usize;
        assert_eq!(length, frame.len() - 4);
        assert_eq!(decode(&frame[4..]), Ok(job));
    }

    #[test]
    fn a_torn_job_is_an_error_not_a_guess() {
        let job = Job {
            grace: Duration::from_millis(1),
            policy: None,
            shell: "/bin/sh".into(),
            command: "true".into(),
            positional: Vec::new(),
            env: vec![("K".into(), "V".into())],
            workdir: "/".into(),
        };
        let frame = encode(&job);
        for cut in 4..frame.len() - 1 {
            assert!(decode(&frame[4..cut]).is_err(), "cut at {cut} decoded");
        }
    }
}
