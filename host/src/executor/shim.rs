//! The process between the host and a command: `hotsh-shim __shim BUILD GRACE_MS LIFELINE_FD
//! POLICY SHELL COMMAND` (POLICY is `-` or the sandbox policy as JSON). `hotsh-shim` is a small
//! executable built beside `hotsh` from this same code; where it is missing, the host starts
//! itself as `hotsh __shim …`. BUILD is the host's [`BUILD`]: a shim from another build refuses
//! to run anything, since the arguments may mean something else to it.
//!
//! It exists so that no process of a command outlives the host, however the host ends (even
//! SIGKILL), and so that stopping a command stops all of it (DESIGN §6):
//!
//! - It becomes a *child subreaper*: every process the command orphans (a `&` job whose shell
//!   exited, a `setsid` daemon that double-forked) is re-parented to the shim, not to init.
//! - It runs the command as `SHELL -c COMMAND` in a process group of its own.
//! - It watches LIFELINE_FD, the read end of a pipe whose write end only the host holds. End of file
//!   there means the host is gone: the shim kills everything and exits.
//! - SIGTERM (or SIGINT, SIGHUP) from the host means "stop the command": SIGTERM to the group and
//!   every other descendant it can see, SIGKILL after GRACE_MS.
//! - When the shell exits, whatever is left (group members, orphans) is killed, every child is
//!   reaped, and the shim exits the way the shell did (same code, or the same signal).
//!
//! - Under a sandbox policy it confines itself before it starts the shell (Landlock, seccomp,
//!   a read-only `.git`), or starts the shell inside bubblewrap (`sandbox/confine.rs`); if the
//!   policy cannot be enforced it runs nothing and exits 125.
//!
//! It is plain blocking code on one thread (poll on the lifeline and a signalfd); it runs before
//! any runtime is started.

use crate::sandbox::{Policy, confine};
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// The hidden subcommand.
pub(crate) const SUBCOMMAND: &str = "__shim";

/// Which build of hotsh this shim belongs to.
pub(crate) const BUILD: &str = concat!(env!("CARGO_PKG_VERSION"), "+", env!("HOTSH_COMMIT"));

/// The small executable beside `hotsh` that runs only the shim.
pub(crate) const PROGRAM: &str = "hotsh-shim";

/// Entry point; never returns.
pub(crate) fn main(args: &[OsString]) -> ! {
    let [build, grace_ms, lifeline, policy, shell, command, positional @ ..] = args else {
        eprintln!(
            "hotsh __shim: usage: hotsh __shim BUILD GRACE_MS LIFELINE_FD POLICY SHELL COMMAND [ARG…]"
        );
        std::process::exit(2);
    };
    if build != BUILD {
        fail(&format!(
            "this shim is from hotsh {BUILD}, but the agent is hotsh {}; the command was not \
             run: reinstall hotsh so that {PROGRAM} beside it comes from the same build",
            build.to_string_lossy()
        ));
    }
    let policy: Option<Policy> = match policy.to_str() {
        Some("-") => None,
        Some(json) => match serde_json::from_str(json) {
            Ok(policy) => Some(policy),
            Err(error) => fail(&format!("the sandbox policy is not valid: {error}")),
        },
        None => fail("the sandbox policy is not UTF-8"),
    };
    let Some(lifeline) = lifeline.to_str().and_then(|fd| fd.parse::<i32>().ok()) else {
        fail("the lifeline is not a descriptor number");
    };
    let grace =
        Duration::from_millis(grace_ms.to_str().and_then(|g| g.parse().ok()).unwrap_or(2000));
    // SAFETY: plain libc calls on this single-threaded process; arguments are valid.
    let subreaper = unsafe {
        libc::fcntl(lifeline, libc::F_SETFD, libc::FD_CLOEXEC);
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    };
    if subreaper != 0 {
        // Without it the command's orphans would escape: fail closed, run nothing.
        fail(&format!("cannot become a child subreaper: {}", std::io::Error::last_os_error()));
    }
    let signals = match SignalFd::new(&[libc::SIGCHLD, libc::SIGTERM, libc::SIGINT, libc::SIGHUP]) {
        Ok(fd) => fd,
        Err(error) => fail(&format!("cannot watch signals: {error}")),
    };
    if let Some(policy) = policy.as_ref().filter(|p| p.bwrap.is_none())
        && let Err(error) = confine::restrict_self(policy)
    {
        // Fail closed: the command asked for confinement it would not get.
        fail(&format!("the sandbox cannot be enforced, so the command was not run: {error}"));
    }
    let mut argv = confine::shell_argv(policy.as_ref(), std::path::Path::new(shell), command);
    // `$0`, `$1`, … of the command (an MCP server's program and arguments, never quoted).
    argv.extend(positional.iter().cloned());
    let mut shell_command = std::process::Command::new(&argv[0]);
    // The shim's own stdin: nothing for a command, the host's pipe for an MCP server.
    shell_command.args(&argv[1..]).stdin(Stdio::inherit());
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        shell_command.pre_exec(|| {
            // A session (and process group) of its own: the command has no controlling
            // terminal of the host's to reach, and its group is the shell's pid.
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The agent ignores SIGXFSZ for itself; a command gets the usual behaviour.
            libc::signal(libc::SIGXFSZ, libc::SIG_DFL);
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
            // Covers the shell if the shim itself is killed; the rest is the subreaper's job.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            Ok(())
        });
    }
    #[expect(clippy::disallowed_methods, reason = "the shim is part of the executor")]
    let shell_child = match shell_command.spawn() {
        Ok(child) => child,
        Err(error) => {
            eprintln!("hotsh: cannot start {}: {error}", shell.to_string_lossy());
            std::process::exit(127);
        }
    };
    let shell_pid = shell_child.id() as libc::pid_t;
    // The child handle is not used to wait: the shim reaps with waitpid(-1) itself.
    drop(shell_child);

    let mut shell_status: Option<i32> = None;
    let mut kill_at: Option<Instant> = None;
    loop {
        let timeout_ms = kill_at.map_or(-1, |at| {
            at.saturating_duration_since(Instant::now()).as_millis().min(i32::MAX as u128) as i32
        });
        let mut fds = [
            libc::pollfd { fd: lifeline, events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: signals.fd, events: libc::POLLIN, revents: 0 },
        ];
        // SAFETY: `fds` is a valid array of two pollfd.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), 2, timeout_ms) };
        if ready < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            kill_everything(shell_pid);
            std::process::exit(125);
        }
        if fds[0].revents != 0 {
            // The host is gone (or wrote to a pipe it never writes to): nothing may survive.
            kill_everything(shell_pid);
            exit_like(shell_status.unwrap_or(libc::SIGKILL));
        }
        if ready == 0 {
            // The grace period is over.
            signal_all(shell_pid, libc::SIGKILL);
            kill_at = None;
            continue;
        }
        if fds[1].revents != 0 {
            for signal in signals.read() {
                match signal {
                    libc::SIGCHLD => {}
                    _ if kill_at.is_none() => {
                        signal_all(shell_pid, libc::SIGTERM);
                        kill_at = Some(Instant::now() + grace);
                    }
                    _ => {}
                }
            }
            reap(shell_pid, &mut shell_status);
            if let Some(status) = shell_status {
                kill_everything(shell_pid);
                exit_like(status);
            }
        }
    }
}

fn fail(message: &str) -> ! {
    eprintln!("hotsh __shim: {message}");
    std::process::exit(125);
}

/// Reaps every child that has ended, noting the shell's wait status.
fn reap(shell_pid: libc::pid_t, shell_status: &mut Option<i32>) {
    loop {
        let mut status = 0;
        // SAFETY: valid out pointer.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return;
        }
        if pid == shell_pid {
            *shell_status = Some(status);
        }
    }
}

/// Sends `signal` to the shell's group and to every child of the shim with its group.
fn signal_all(shell_pid: libc::pid_t, signal: i32) {
    // SAFETY: kill/killpg with a pid we own; errors (ESRCH) are expected and ignored.
    unsafe {
        libc::killpg(shell_pid, signal);
        let own_group = libc::getpgrp();
        for child in children() {
            libc::kill(child, signal);
            let group = libc::getpgid(child);
            if group > 0 && group != own_group {
                libc::killpg(group, signal);
            }
        }
    }
}

/// SIGKILLs everything until the shell's group is empty and the shim has no child left.
///
/// A killed process's children are re-parented to the shim before the process leaves its
/// group, so "group empty and no children" means nothing of the command is left. The common
/// case (the shell was alone) costs two system calls; /proc is scanned only when children
/// remain.
fn kill_everything(shell_pid: libc::pid_t) {
    loop {
        let mut status = 0;
        // SAFETY: kill/killpg/waitpid on processes the shim owns; errors are expected.
        unsafe {
            libc::killpg(shell_pid, libc::SIGKILL);
            let children_left = reap_ended();
            let group_alive = libc::killpg(shell_pid, 0) == 0;
            if !group_alive && !children_left {
                return;
            }
            if children_left {
                signal_all(shell_pid, libc::SIGKILL);
                libc::waitpid(-1, &mut status, 0);
            } else {
                // Group members that are not the shim's children are dying; give them a moment.
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

/// Reaps every child that has ended; true when children remain (running ones). A reaped pid
/// says nothing about the others: only "no child has ended" (0) or "no children" (ECHILD)
/// ends the loop.
fn reap_ended() -> bool {
    loop {
        let mut status = 0;
        // SAFETY: a non-blocking wait with a valid out pointer.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid > 0 {
            continue;
        }
        if pid < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        return pid == 0;
    }
}

/// The pids whose parent is this process, read from /proc.
fn children() -> Vec<libc::pid_t> {
    let own = std::process::id() as libc::pid_t;
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<libc::pid_t>().ok())
        .filter(|&pid| super::process::parent_of(pid as u32) == Some(own as u32))
        .collect()
}

/// Exits with the shell's wait status: the same exit code, or death by the same signal.
fn exit_like(status: i32) -> ! {
    if libc::WIFEXITED(status) {
        std::process::exit(libc::WEXITSTATUS(status));
    }
    let signal = if libc::WIFSIGNALED(status) { libc::WTERMSIG(status) } else { libc::SIGKILL };
    // SAFETY: resetting the disposition and unblocking before raising the same signal.
    unsafe {
        libc::signal(signal, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, signal);
        libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        // No core dump for a re-raised SIGSEGV and friends.
        let no_core = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        libc::setrlimit(libc::RLIMIT_CORE, &no_core);
        libc::raise(signal);
    }
    std::process::exit(128 + signal);
}

/// Blocked signals delivered through a file descriptor.
struct SignalFd {
    fd: i32,
}

impl SignalFd {
    fn new(signals: &[i32]) -> std::io::Result<Self> {
        // SAFETY: a zeroed sigset is initialised by sigemptyset before use.
        unsafe {
            let mut mask: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut mask);
            for &signal in signals {
                libc::sigaddset(&mut mask, signal);
            }
            if libc::sigprocmask(libc::SIG_BLOCK, &mask, std::ptr::null_mut()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            let fd = libc::signalfd(-1, &mask, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK);
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(Self { fd })
        }
    }

    /// The signals that arrived since the last read.
    fn read(&self) -> Vec<i32> {
        let mut signals = Vec::new();
        loop {
            // SAFETY: reading into a properly sized, zeroed siginfo buffer.
            let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
            let size = std::mem::size_of::<libc::signalfd_siginfo>();
            let read = unsafe {
                libc::read(self.fd, (&mut info as *mut libc::signalfd_siginfo).cast(), size)
            };
            if read != size as isize {
                return signals;
            }
            signals.push(info.ssi_signo as i32);
        }
    }
}

/// The program the host starts as a shim.
#[derive(Debug)]
pub(crate) struct Program {
    /// What is executed: `/proc/self/fd/N` for the opened [`PROGRAM`], or `/proc/self/exe`.
    pub(crate) path: std::path::PathBuf,
    /// Held open so that every shim comes from the file found at start, even after a new build
    /// replaced it on disk (the new one may not understand this host's arguments).
    _file: Option<std::fs::File>,
}

impl Program {
    /// [`PROGRAM`] beside this executable when it is there (it starts in a fraction of the time
    /// a re-executed `hotsh` takes), else this very executable.
    pub(crate) fn find() -> Self {
        use std::os::fd::AsRawFd as _;
        let beside = std::env::current_exe()
            .ok()
            .and_then(|exe| Some(exe.parent()?.join(PROGRAM)))
            .and_then(|shim| std::fs::File::open(shim).ok())
            .filter(|file| file.metadata().is_ok_and(|m| super::is_executable(&m)));
        match beside {
            Some(file) => Self {
                path: format!("/proc/self/fd/{}", file.as_raw_fd()).into(),
                _file: Some(file),
            },
            None => Self { path: "/proc/self/exe".into(), _file: None },
        }
    }
}

/// The argument vector that starts a shim for `command`.
pub(crate) fn arguments(
    grace: Duration,
    lifeline: i32,
    policy: Option<&Policy>,
    shell: &std::path::Path,
    command: &str,
    positional: &[OsString],
) -> Vec<OsString> {
    let policy =
        policy.and_then(|p| serde_json::to_string(p).ok()).unwrap_or_else(|| "-".to_owned());
    vec![
        SUBCOMMAND.into(),
        BUILD.into(),
        grace.as_millis().to_string().into(),
        lifeline.to_string().into(),
        policy.into(),
        shell.as_os_str().to_owned(),
        command.into(),
    ]
    .into_iter()
    .chain(positional.iter().cloned())
    .collect()
}
