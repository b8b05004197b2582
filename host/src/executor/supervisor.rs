//! The command supervisor: one small long-lived process per host that forks a shim for each
//! command, so that no command pays for an `exec` of the shim (DESIGN §6; ARCHITECTURE.md,
//! "Measured", says why: on this kind of machine an `exec` costs more than a millisecond).
//!
//! The host starts it once (`hotsh-shim __supervisor BUILD LIFELINE_FD CONTROL_FD`, or
//! `hotsh __supervisor …` where `hotsh-shim` is missing) with an empty environment, in `/`, in a
//! process group of its own. Over CONTROL_FD, one end of a Unix socket pair, the host sends a
//! [`Job`] with four descriptors (the command's stdin, stdout, stderr and the status pipe's
//! write end); the supervisor forks, the fork puts the pipes on 0, 1 and 2 and becomes the
//! command's shim ([`shim::run`]), and the supervisor answers with the shim's pid and a pidfd
//! for it. How the command ended comes to the host through the status pipe, not through the
//! supervisor, so the host waits for nothing it cannot see.
//!
//! The supervisor is a child subreaper: if a command kills its shim, what the shim leaves
//! behind comes to the supervisor, which kills it. It stops taking jobs when the host closes
//! the socket or the lifeline ends, and exits once it has no child left. If it dies (a command
//! can kill it: it runs as the same user), its shims are re-parented to the host, which kills
//! them as strangers; the host starts a new supervisor for the next command.
//!
//! The supervisor must stay single-threaded: its forks run Rust code without an `exec`.

use super::process::{self, Pidfd};
use super::shim::{self, BUILD, Job, SignalFd, StatusPipe};
use crate::sandbox::Policy;
use crate::sync::lock;
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use std::collections::BTreeSet;
use std::ffi::OsString;
use std::io::{IoSlice, IoSliceMut, Read as _};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd as _, AsRawFd as _, BorrowedFd, FromRawFd as _, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt as _, OsStringExt as _};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt as _;
use std::process::Stdio;
use std::sync::Mutex;
use std::time::Duration;

/// The hidden subcommand.
pub(crate) const SUBCOMMAND: &str = "__supervisor";

/// Descriptors sent with each job: stdin, stdout, stderr, the status pipe.
const JOB_FDS: usize = 4;

/// A job's frame larger than this is refused (the command, its arguments and environment).
const MAX_FRAME: usize = 64 << 20;

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

/// Entry point of `__supervisor`; never returns.
pub(crate) fn main(args: &[OsString]) -> ! {
    let [build, lifeline, control] = args else {
        eprintln!("hotsh __supervisor: usage: hotsh __supervisor BUILD LIFELINE_FD CONTROL_FD");
        std::process::exit(2);
    };
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
    // SAFETY: plain libc calls on this single-threaded process with valid arguments.
    let subreaper = unsafe {
        libc::fcntl(lifeline, libc::F_SETFD, libc::FD_CLOEXEC);
        libc::fcntl(control, libc::F_SETFD, libc::FD_CLOEXEC);
        // Like the host: another process of the user cannot read this one's memory.
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
        // Its name in `ps` and `/proc/PID/comm` (exec'd as `/proc/self/fd/N`, it would be N).
        libc::prctl(libc::PR_SET_NAME, c"hotsh-supervise".as_ptr(), 0, 0, 0);
        // A session of its own, without a controlling terminal, for it and every command:
        // no command can reach the terminal hotsh runs in, nor get its Ctrl-C.
        libc::setsid();
        // The host ignores SIGXFSZ for itself; commands get the usual behaviour.
        libc::signal(libc::SIGXFSZ, libc::SIG_DFL);
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    };
    if subreaper != 0 {
        fail(&format!("cannot become a child subreaper: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: the host passed this descriptor for the supervisor to own.
    let control = unsafe { OwnedFd::from_raw_fd(control) };
    // Ignored for itself, blocked and read: only the host's socket and lifeline end it.
    let signals = match SignalFd::new(&[libc::SIGCHLD, libc::SIGTERM, libc::SIGINT, libc::SIGHUP]) {
        Ok(fd) => fd,
        Err(error) => fail(&format!("cannot watch signals: {error}")),
    };
    let mut shims = BTreeSet::new();
    let mut spare = fork_spare(lifeline, &control, &signals).ok();
    shims.extend(spare.as_ref().map(|s| s.pid));
    let mut taking_jobs = true;
    loop {
        let mut fds = [
            libc::pollfd { fd: signals.fd, events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: lifeline, events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: control.as_raw_fd(), events: libc::POLLIN, revents: 0 },
        ];
        let watched = if taking_jobs { 3 } else { 1 };
        // SAFETY: `fds` holds at least `watched` valid pollfd.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), watched, -1) };
        if ready < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            fail(&format!("poll failed: {}", std::io::Error::last_os_error()));
        }
        if fds[0].revents != 0 {
            signals.read();
            reap_and_sweep(&mut shims);
        }
        if taking_jobs && fds[1].revents != 0 {
            // The host is gone; each shim sees the same end and stops its command.
            taking_jobs = false;
        }
        if taking_jobs && fds[2].revents != 0 {
            match receive(control.as_fd()) {
                Ok(Some((frame, pipes))) => {
                    let answer =
                        hand_over(&mut spare, &frame, &pipes, lifeline, &control, &signals);
                    drop(pipes);
                    if let Ok(shim) = &answer {
                        shims.insert(shim.pid);
                    }
                    if answer_host(control.as_fd(), answer).is_err() {
                        taking_jobs = false;
                    }
                    // The next job's shim is forked now, while this one's command runs.
                    spare = fork_spare(lifeline, &control, &signals).ok();
                    shims.extend(spare.as_ref().map(|s| s.pid));
                }
                Ok(None) => taking_jobs = false,
                Err(error) => {
                    eprintln!("hotsh supervisor: a job could not be read ({error}); stopping");
                    taking_jobs = false;
                }
            }
        }
        if !taking_jobs {
            if let Some(idle) = spare.take() {
                // SAFETY: our own unreaped child; it has no command yet.
                unsafe { libc::kill(idle.pid, libc::SIGKILL) };
            }
            reap_and_sweep(&mut shims);
            if shims.is_empty() && shim::children().is_empty() {
                std::process::exit(0);
            }
        }
    }
}

fn fail(message: &str) -> ! {
    eprintln!("hotsh __supervisor: {message}");
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
            eprintln!(
                "hotsh supervisor: a process was re-parented to the supervisor (its shim was \
                 killed); killing it"
            );
            // SAFETY: our own unreaped child, so the pid cannot have been recycled.
            unsafe { libc::kill(child, libc::SIGKILL) };
        }
    }
}

/// Reads one job's frame (its length included) and its descriptors; `None` at end of file
/// (the host closed the socket).
fn receive(control: BorrowedFd<'_>) -> std::io::Result<Option<(Vec<u8>, Vec<OwnedFd>)>> {
    let mut length = [0u8; 4];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(JOB_FDS))];
    let mut ancillary = RecvAncillaryBuffer::new(&mut space);
    let received = rustix::net::recvmsg(
        control,
        &mut [IoSliceMut::new(&mut length)],
        &mut ancillary,
        RecvFlags::CMSG_CLOEXEC | RecvFlags::WAITALL,
    )?;
    let mut fds = Vec::new();
    for message in ancillary.drain() {
        if let RecvAncillaryMessage::ScmRights(rights) = message {
            fds.extend(rights);
        }
    }
    if received.bytes == 0 {
        return Ok(None);
    }
    if received.bytes < 4 {
        return Err(std::io::Error::other("the job's length is cut short"));
    }
    let length = u32::from_le_bytes(length) as usize;
    if length > MAX_FRAME {
        return Err(std::io::Error::other(format!("a job of {length} bytes is too large")));
    }
    let mut frame = vec![0; 4 + length];
    frame[..4].copy_from_slice(&(length as u32).to_le_bytes());
    // SAFETY: `control` stays open for the duration; ManuallyDrop keeps it from being closed.
    let mut stream =
        std::mem::ManuallyDrop::new(unsafe { UnixStream::from_raw_fd(control.as_raw_fd()) });
    stream.read_exact(&mut frame[4..])?;
    if fds.len() != JOB_FDS {
        return Err(std::io::Error::other(format!("a job came with {} descriptors", fds.len())));
    }
    Ok(Some((frame, fds)))
}

/// Sends a frame with descriptors: the descriptors go with the first bytes. The error says
/// whether any byte went.
fn send_frame(
    socket: BorrowedFd<'_>,
    frame: &[u8],
    fds: &[BorrowedFd<'_>],
) -> Result<(), (bool, std::io::Error)> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(JOB_FDS))];
    let mut ancillary = SendAncillaryBuffer::new(&mut space);
    ancillary.push(SendAncillaryMessage::ScmRights(fds));
    let sent =
        rustix::net::sendmsg(socket, &[IoSlice::new(frame)], &mut ancillary, SendFlags::NOSIGNAL)
            .map_err(|e| (false, e.into()))?;
    let mut rest = &frame[sent..];
    while !rest.is_empty() {
        let sent =
            rustix::net::send(socket, rest, SendFlags::NOSIGNAL).map_err(|e| (true, e.into()))?;
        rest = &rest[sent..];
    }
    Ok(())
}

/// A shim forked before its job, waiting on its end of a socket pair: the fork is then off
/// the path of the command that uses it.
struct Spare {
    pid: libc::pid_t,
    /// Opened before the supervisor can reap it, so it names this very process.
    pidfd: Option<Pidfd>,
    channel: UnixStream,
}

/// Forks a spare shim. The answer is the error of `fork` if it fails.
fn fork_spare(lifeline: RawFd, control: &OwnedFd, signals: &SignalFd) -> Result<Spare, i32> {
    let errno = |e: std::io::Error| e.raw_os_error().unwrap_or(libc::EIO);
    let (channel, theirs) = UnixStream::pair().map_err(errno)?;
    // SAFETY: this process is single-threaded, so the fork may run any code.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(errno(std::io::Error::last_os_error()));
    }
    if pid > 0 {
        drop(theirs);
        let pidfd = Pidfd::open(pid as u32).ok();
        return Ok(Spare { pid, pidfd, channel });
    }
    // SAFETY: the fork closes the supervisor's descriptors it must not hold (they belong to
    // the supervisor's frame, which this fork never returns to).
    unsafe {
        libc::close(signals.fd);
        libc::close(control.as_raw_fd());
        libc::close(channel.as_raw_fd());
        // A process group of its own, as the host signals it alone.
        libc::setpgid(0, 0);
        libc::prctl(libc::PR_SET_NAME, c"hotsh-shim".as_ptr(), 0, 0, 0);
    }
    std::mem::forget(channel);
    let prepared = shim::Shim::prepare();
    // The supervisor gone before a job came (its end closed): nothing to do.
    let Ok(Some((frame, pipes))) = receive(theirs.as_fd()) else { std::process::exit(0) };
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
        (Ok(shim), Ok(job)) => shim.run(job, lifeline, report),
        (Err(error), _) => report.fail(&error),
        (_, Err(error)) => report.fail(&format!("the command could not be read: {error}")),
    }
}

/// Gives the job to the spare shim (forking one if there is none, or another if it died);
/// the answer is the shim, or the error of `fork`.
fn hand_over(
    spare: &mut Option<Spare>,
    frame: &[u8],
    pipes: &[OwnedFd],
    lifeline: RawFd,
    control: &OwnedFd,
    signals: &SignalFd,
) -> Result<Spare, i32> {
    let fds: Vec<BorrowedFd<'_>> = pipes.iter().map(|p| p.as_fd()).collect();
    let mut error = libc::EIO;
    for _ in 0..2 {
        let shim = match spare.take() {
            Some(shim) => shim,
            None => fork_spare(lifeline, control, signals)?,
        };
        match send_frame(shim.channel.as_fd(), frame, &fds) {
            Ok(()) => return Ok(shim),
            Err((_, failed)) => {
                // The spare died (a command can kill it); it is reaped with the others.
                error = failed.raw_os_error().unwrap_or(libc::EIO);
                // SAFETY: our own unreaped child.
                unsafe { libc::kill(shim.pid, libc::SIGKILL) };
            }
        }
    }
    Err(error)
}

/// Sends the host the answer to its job: the pid (or 0) and an error number, with a pidfd for
/// the shim when the kernel has them.
fn answer_host(control: BorrowedFd<'_>, answer: Result<Spare, i32>) -> std::io::Result<()> {
    let (pid, errno, pidfd) = match answer {
        Ok(shim) => (shim.pid, 0, shim.pidfd),
        Err(errno) => (0, errno, None),
    };
    let mut bytes = [0u8; 8];
    bytes[..4].copy_from_slice(&pid.to_le_bytes());
    bytes[4..].copy_from_slice(&errno.to_le_bytes());
    let fds: Vec<BorrowedFd<'_>> = pidfd.iter().map(|p| p.as_fd()).collect();
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut ancillary = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() {
        ancillary.push(SendAncillaryMessage::ScmRights(&fds));
    }
    rustix::net::sendmsg(control, &[IoSlice::new(&bytes)], &mut ancillary, SendFlags::NOSIGNAL)?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The host's side.

/// A shim the supervisor started.
#[derive(Debug)]
pub(crate) struct Started {
    pub(crate) pid: u32,
    pub(crate) pidfd: Option<Pidfd>,
}

/// The host's handle on its supervisor: started on first use (or ahead of it, by
/// [`Supervisor::warm_up`]), started again when it died.
#[derive(Debug)]
pub(crate) struct Supervisor {
    program: shim::Program,
    lifeline: RawFd,
    running: Mutex<Option<Running>>,
}

#[derive(Debug)]
struct Running {
    child: std::process::Child,
    pidfd: Option<Pidfd>,
    socket: UnixStream,
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
        Self { program: shim::Program::find(), lifeline, running: Mutex::new(None) }
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
        let frame = encode(job);
        let mut running = lock(&self.running);
        // A supervisor that has died is replaced before the job is sent.
        if running.as_ref().is_some_and(|r| r.pidfd.as_ref().is_some_and(|p| p.has_exited())) {
            tracing::warn!("the command supervisor has died; starting a new one");
            end(running.take());
        }
        let mut last_error = None;
        for _ in 0..2 {
            if running.is_none() {
                *running = Some(self.launch()?);
            }
            let Some(current) = running.as_ref() else { continue };
            match current.send(&frame, pipes) {
                Ok(started) => return Ok(started),
                Err(Failure::Refused(error)) => return Err(error),
                Err(Failure::Unknown(error)) => {
                    end(running.take());
                    return Err(std::io::Error::other(format!(
                        "the command supervisor ended while starting the command ({error}); \
                         the command may have started and been killed with it"
                    )));
                }
                Err(Failure::NotSent(error)) => {
                    tracing::warn!(%error, "the command supervisor is gone; starting a new one");
                    end(running.take());
                    last_error = Some(error);
                }
            }
        }
        Err(last_error.unwrap_or_else(|| std::io::Error::other("no supervisor")))
    }

    /// Closes the socket (the supervisor stops taking jobs and exits once its shims are gone)
    /// and reaps the supervisor if it ends within `within`; kills it otherwise.
    pub(crate) fn close(&self, within: Duration) {
        let Some(mut running) = lock(&self.running).take() else { return };
        let _ = running.socket.shutdown(std::net::Shutdown::Both);
        let ended = running.pidfd.as_ref().is_none_or(|p| p.wait_exit(within));
        if !ended {
            let _ = running.child.kill();
        }
        let _ = running.child.wait();
        process::reaped(Some(running.child.id()));
    }

    fn launch(&self) -> std::io::Result<Running> {
        let (socket, theirs) = UnixStream::pair()?;
        let theirs_fd = theirs.as_raw_fd();
        let mut command = std::process::Command::new(&self.program.path);
        command
            .args([
                OsString::from(SUBCOMMAND),
                BUILD.into(),
                self.lifeline.to_string().into(),
                theirs_fd.to_string().into(),
            ])
            .env_clear()
            .current_dir("/")
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        // SAFETY: fcntl is async-signal-safe; it makes the socket's end inheritable in this
        // child only (a fork, once per supervisor, rather than a posix_spawn).
        unsafe {
            command.pre_exec(move || {
                if libc::fcntl(theirs_fd, libc::F_SETFD, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        #[expect(clippy::disallowed_methods, reason = "the executor is where processes start")]
        let child = process::spawn_own(|| command.spawn(), |c| Some(c.id()))?;
        drop(theirs);
        let pidfd = Pidfd::open(child.id()).ok();
        tracing::debug!(pid = child.id(), program = %self.program.path.display(), "command supervisor started");
        Ok(Running { child, pidfd, socket })
    }
}

impl Running {
    fn send(&self, frame: &[u8], pipes: [BorrowedFd<'_>; JOB_FDS]) -> Result<Started, Failure> {
        send_frame(self.socket.as_fd(), frame, &pipes).map_err(|(partly, error)| {
            if partly { Failure::Unknown(error) } else { Failure::NotSent(error) }
        })?;
        self.answer().map_err(Failure::Unknown)?
    }

    /// Waits for the supervisor's answer: a nudge (SIGCONT) if it is slow, an error if it never
    /// comes.
    fn answer(&self) -> std::io::Result<Result<Started, Failure>> {
        let mut waited = Duration::ZERO;
        for limit in [NUDGE_AFTER, GIVE_UP_AFTER] {
            let mut fds =
                [libc::pollfd { fd: self.socket.as_raw_fd(), events: libc::POLLIN, revents: 0 }];
            let ms = (limit - waited).as_millis() as i32;
            // SAFETY: one valid pollfd.
            let ready = unsafe { libc::poll(fds.as_mut_ptr(), 1, ms) };
            if ready > 0 {
                return self.read_answer();
            }
            if ready < 0
                && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted
            {
                return Err(std::io::Error::last_os_error());
            }
            if let Some(pidfd) = &self.pidfd {
                pidfd.signal(libc::SIGCONT);
            }
            waited = limit;
        }
        Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no answer in {} s", GIVE_UP_AFTER.as_secs()),
        ))
    }

    fn read_answer(&self) -> std::io::Result<Result<Started, Failure>> {
        let mut bytes = [0u8; 8];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut ancillary = RecvAncillaryBuffer::new(&mut space);
        let received = rustix::net::recvmsg(
            &self.socket,
            &mut [IoSliceMut::new(&mut bytes)],
            &mut ancillary,
            RecvFlags::CMSG_CLOEXEC | RecvFlags::WAITALL,
        )?;
        let pidfd = ancillary
            .drain()
            .filter_map(|m| match m {
                RecvAncillaryMessage::ScmRights(mut rights) => rights.next(),
                _ => None,
            })
            .next()
            .map(Pidfd::from);
        if received.bytes != bytes.len() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the supervisor closed the socket",
            ));
        }
        let pid = i32::from_le_bytes(bytes[..4].try_into().unwrap_or_default());
        let errno = i32::from_le_bytes(bytes[4..].try_into().unwrap_or_default());
        Ok(if pid > 0 {
            Ok(Started { pid: pid as u32, pidfd })
        } else {
            Err(Failure::Refused(std::io::Error::from_raw_os_error(errno)))
        })
    }
}

/// Kills a supervisor given up on and reaps it. Its shims are re-parented to the host, which
/// kills them as strangers.
fn end(running: Option<Running>) {
    if let Some(mut running) = running {
        let _ = running.child.kill();
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
