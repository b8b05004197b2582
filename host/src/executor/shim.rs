//! The process between the host and a command. It is a fork of the host's command supervisor
//! (`supervisor.rs`), never a program of its own: [`Shim::run`] is what the fork runs, with
//! the command's pipes already on its descriptors 0, 1 and 2.
//!
//! It exists so that no process of a command outlives the host, however the host ends (even
//! SIGKILL), and so that stopping a command stops all of it (DESIGN §6):
//!
//! - It becomes a *child subreaper*: every process the command orphans (a `&` job whose shell
//!   exited, a `setsid` daemon that double-forked) is re-parented to the shim, not to init.
//! - It runs the command as `SHELL -c COMMAND` in a process group of its own.
//! - It watches the lifeline, the read end of a pipe whose write end only the host holds. End
//!   of file there means the host is gone: the shim kills everything and exits.
//! - SIGTERM (or SIGINT, SIGHUP) from the host means "stop the command": SIGTERM to the group and
//!   every other descendant it can see, SIGKILL after the grace period.
//! - When the shell exits, whatever is left (group members, orphans) is killed, every child is
//!   reaped, the shell's wait status is written to the status pipe the host reads, and the shim
//!   exits the way the shell did (same code, or the same signal).
//!
//! - Under a sandbox policy it confines itself before it starts the shell (Landlock, seccomp,
//!   a read-only `.git`), or starts the shell inside bubblewrap (`sandbox/linux/confine.rs`); if the
//!   policy cannot be enforced it runs nothing and exits 125.
//!
//! It is plain blocking code on one thread (poll on the lifeline and a signalfd).

use super::process::SignalFd;
use crate::sandbox::gated::{Gated, spawn_gated};
use crate::sandbox::{Policy, confine, notify};
use std::ffi::OsString;
use std::os::fd::{AsRawFd as _, OwnedFd};
use std::time::{Duration, Instant};

/// Which build of hotsh the supervisor belongs to.
pub(crate) const BUILD: &str = concat!(env!("CARGO_PKG_VERSION"), "+", env!("HOTSH_COMMIT"));

/// The small executable beside `hotsh` that runs only the supervisor.
pub(crate) const PROGRAM: &str = "hotsh-shim";

/// One command: everything the host sends the supervisor for it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Job {
    /// Between SIGTERM and SIGKILL when the command is stopped.
    pub(crate) grace: Duration,
    pub(crate) policy: Option<Policy>,
    pub(crate) shell: OsString,
    pub(crate) command: OsString,
    /// `$0`, `$1`, … of the command (an MCP server's program and arguments, never quoted).
    pub(crate) positional: Vec<OsString>,
    /// The command's whole environment.
    pub(crate) env: Vec<(OsString, OsString)>,
    pub(crate) workdir: OsString,
}

/// The byte after the wait status on the status pipe when the command never started.
pub(crate) const NOT_RUN: u8 = b'!';
/// The byte after the wait status when it did.
pub(crate) const RAN: u8 = b'.';

/// Where the shim writes how the command ended (four bytes: the shell's wait status) just
/// before it exits. The host reads it to end of file; nothing there means the shim was killed.
pub(crate) struct StatusPipe(OwnedFd);

impl StatusPipe {
    pub(crate) fn new(fd: OwnedFd) -> Self {
        Self(fd)
    }

    /// Reports `status` and exits the same way. The command's pipes (the shim's own 0, 1
    /// and 2) are closed first, so the host has all of the output when it reads the status.
    fn exit(self, status: i32) -> ! {
        self.report(status, false)
    }

    /// [`Self::exit`], with a fifth byte: [`NOT_RUN`] when the command never started (the
    /// host then knows that what the shim said is no answer of the command's, never a sandbox
    /// denial, whatever its words), else [`RAN`]. Five bytes in all, so that the host has the
    /// whole report without waiting for the pipe to close (which comes only once this process
    /// has been torn down).
    fn report(self, status: i32, not_run: bool) -> ! {
        let mut bytes = status.to_le_bytes().to_vec();
        bytes.push(if not_run { NOT_RUN } else { RAN });
        // SAFETY: closing our own standard descriptors, then a write of four bytes from a valid
        // buffer to a descriptor we own; a short or failed write leaves the host reading
        // "killed", which is all it could mean.
        unsafe {
            for fd in 0..=2 {
                libc::close(fd);
            }
            libc::write(self.0.as_raw_fd(), bytes.as_ptr().cast(), bytes.len());
        }
        exit_like(status)
    }

    /// Says why nothing ran (on the command's stderr) and exits 125.
    pub(crate) fn fail(self, message: &str) -> ! {
        eprintln!("hotsh: {message}");
        self.report(125 << 8, true)
    }
}

/// A shim made ready before its job arrives (a fork of the supervisor kept in reserve).
pub(crate) struct Shim {
    signals: SignalFd,
}

impl Shim {
    /// Becomes a child subreaper and watches the signals; the error says what failed (the
    /// shim then runs nothing: without it the command's orphans would escape).
    pub(crate) fn prepare() -> Result<Self, String> {
        super::process::become_subreaper()
            .map_err(|error| format!("cannot become a child subreaper: {error}"))?;
        let signals = SignalFd::new(&[libc::SIGCHLD, libc::SIGTERM, libc::SIGINT, libc::SIGHUP])
            .map_err(|error| format!("cannot watch signals: {error}"))?;
        Ok(Self { signals })
    }

    /// Runs `job` in this process (its descriptors 0 to 2 the command's) until the command has
    /// ended; never returns.
    ///
    /// `environment` is the policy of the sandbox environment this shim runs in (its
    /// supervisor's, see `supervisor.rs`), `None` outside one: inside, the mounts, network,
    /// Landlock rules and capabilities are already the policy's, and a job under any other
    /// policy is refused.
    pub(crate) fn run(
        self,
        job: Job,
        lifeline: i32,
        report: StatusPipe,
        environment: Option<&Policy>,
    ) -> ! {
        run(self.signals, job, lifeline, report, environment)
    }
}

fn run(
    signals: SignalFd,
    job: Job,
    lifeline: i32,
    report: StatusPipe,
    environment: Option<&Policy>,
) -> ! {
    if let Err(error) = std::env::set_current_dir(&job.workdir) {
        let workdir = std::path::Path::new(&job.workdir).display();
        report.fail(&format!("cannot enter {workdir}: {error}"));
    }
    if let Some(environment) = environment {
        // Never a command under a policy this environment was not made for.
        if job.policy.as_ref() != Some(environment) {
            report.fail(
                "the sandbox cannot be enforced, so the command was not run: it came to a \
                 sandbox environment made for another policy",
            );
        }
        if let Err(error) = confine::scope_to_command() {
            report.fail(&format!(
                "the sandbox cannot be enforced, so the command was not run: {error}"
            ));
        }
    } else if let Some(policy) = job.policy.as_ref().filter(|p| p.bwrap.is_none())
        && let Err(error) = confine::restrict_self(policy)
    {
        // Fail closed: the command asked for confinement it would not get.
        report
            .fail(&format!("the sandbox cannot be enforced, so the command was not run: {error}"));
    }
    // Into the folder again: a directory entered before the mounts above is the one beneath
    // them (a pinned directory's own mount would be bypassed, and the read-only paths in it).
    if job.policy.is_some()
        && let Err(error) = std::env::set_current_dir(&job.workdir)
    {
        let workdir = std::path::Path::new(&job.workdir).display();
        report.fail(&format!("cannot enter {workdir}: {error}"));
    }
    // The shell starts with its 0, 1 and 2 and nothing else of the shim's.
    super::process::close_inherited(&[], super::process::Inherited::CloseOnExec);
    let shell = std::path::Path::new(&job.shell);
    // Under bwrap the gate runs inside it: this very program, reached through a descriptor
    // bwrap passes on (what is on disk may be a newer build by now).
    let under_bwrap =
        environment.is_none() && job.policy.as_ref().is_some_and(|policy| policy.bwrap.is_some());
    let helper = if under_bwrap {
        match inheritable_self() {
            Ok(fd) => Some(super::process::descriptor_path(fd)),
            Err(error) => report.fail(&format!(
                "the sandbox cannot be enforced, so the command was not run: cannot pass the gate to bwrap: {error}"
            )),
        }
    } else {
        None
    };
    let bwrap_policy = job.policy.as_ref().filter(|_| under_bwrap);
    let long = long_command(&job.command, &job.env);
    let (command, env) = long.as_ref().map_or((&job.command, &job.env), |(c, e)| (c, e));
    let mut argv = confine::shell_argv(bwrap_policy, shell, command, helper.as_deref());
    argv.extend(job.positional.iter().cloned());
    // Some of a confined command's calls come to this shim to be made (`sandbox/linux/notify.rs`),
    // which needs a fork of its own to install the filter in; under bwrap the gate inside
    // does it.
    let gated = job
        .policy
        .as_ref()
        .filter(|_| !under_bwrap)
        .map(|policy| (policy, notify::Filters::for_policy(policy)));
    let (shell_pid, gate) = match gated {
        Some((policy, filters)) => {
            match spawn_gated(&argv, env, shell, filters, true, &DEFAULT_SIGNALS, too_long) {
                Ok((pid, listener)) => (pid, Some(notify::Gate::new(listener, policy))),
                Err(Gated::Unenforced(error)) => report.fail(&format!(
                    "the sandbox cannot be enforced, so the command was not run: {error}"
                )),
                Err(Gated::Start(error)) => cannot_start(shell, &argv, env, &error, report),
            }
        }
        None => match spawn_shell(&argv, env) {
            Ok(pid) => (pid, None),
            Err(error) => cannot_start(shell, &argv, env, &error, report),
        },
    };
    // The filter's last user gone, the descriptor only hangs up: no longer watched.
    let mut gate_open = gate.is_some();

    let mut shell_status: Option<i32> = None;
    let mut kill_at: Option<Instant> = None;
    loop {
        let timeout_ms = kill_at.map_or(-1, |at| {
            at.saturating_duration_since(Instant::now()).as_millis().min(i32::MAX as u128) as i32
        });
        let gate_fd = gate.as_ref().filter(|_| gate_open).map_or(-1, |gate| gate.fd());
        let mut fds = [
            libc::pollfd { fd: lifeline, events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: signals.fd, events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: gate_fd, events: libc::POLLIN, revents: 0 },
        ];
        // SAFETY: `fds` is a valid array of three pollfd (a negative fd is ignored).
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), 3, timeout_ms) };
        if ready < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            kill_everything(shell_pid);
            report.exit(125 << 8);
        }
        if fds[0].revents != 0 {
            // The host is gone (or wrote to a pipe it never writes to): nothing may survive.
            kill_everything(shell_pid);
            report.exit(shell_status.unwrap_or(libc::SIGKILL));
        }
        if let Some(gate) = &gate
            && fds[2].revents != 0
        {
            if fds[2].revents & libc::POLLIN != 0 {
                gate.answer_one();
            } else {
                gate_open = false;
            }
            if fds[0].revents == 0 && fds[1].revents == 0 {
                continue;
            }
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
                        kill_at = Some(Instant::now() + job.grace);
                    }
                    _ => {}
                }
            }
            reap(shell_pid, &mut shell_status);
            if let Some(status) = shell_status {
                kill_everything(shell_pid);
                report.exit(status);
            }
        }
    }
}

/// The longest string `exec` takes (`MAX_ARG_STRLEN`, 32 pages), its NUL included.
const EXEC_STRING_MAX: usize = 32 * 4096;

/// The environment variables a long command travels in, numbered from 0.
const COMMAND_PART: &str = "HOTSH_COMMAND_PART_";

/// For a command too long for one `exec` string: the command `SHELL -c` gets instead, and
/// the environment with the command's parts (`None`: `command` fits, and goes as it is). The
/// shell joins the parts, removes them (from its variables and its children's environment)
/// and runs the whole as `eval` does, with `$0` and the positional parameters of `-c`.
fn long_command(
    command: &OsString,
    env: &[(OsString, OsString)],
) -> Option<(OsString, Vec<(OsString, OsString)>)> {
    use std::os::unix::ffi::{OsStrExt as _, OsStringExt as _};
    let bytes = command.as_bytes();
    if bytes.len() < EXEC_STRING_MAX {
        return None;
    }
    // Each `NAME=part` under the limit.
    let parts: Vec<&[u8]> = bytes.chunks(EXEC_STRING_MAX - 4096).collect();
    let names: Vec<String> = (0..parts.len()).map(|n| format!("{COMMAND_PART}{n}")).collect();
    let joined: String = names.iter().map(|name| format!("${name}")).collect();
    let script = format!(
        "__hotsh_command=\"{joined}\"; unset {}; eval \"unset __hotsh_command; $__hotsh_command\"",
        names.join(" ")
    );
    let env = env
        .iter()
        .filter(|(name, _)| !name.as_bytes().starts_with(COMMAND_PART.as_bytes()))
        .cloned()
        .chain(
            names
                .into_iter()
                .zip(parts)
                .map(|(name, part)| (name.into(), OsString::from_vec(part.to_vec()))),
        )
        .collect();
    Some((script.into(), env))
}

/// The shell could not be started: says why on the command's stderr and exits 127, as a shell
/// does for a program it cannot run.
fn cannot_start(
    shell: &std::path::Path,
    argv: &[OsString],
    env: &[(OsString, OsString)],
    error: &std::io::Error,
    report: StatusPipe,
) -> ! {
    if error.raw_os_error() == Some(libc::E2BIG) {
        let strings = argv.iter().map(|a| a.len() + 1).sum::<usize>()
            + env.iter().map(|(k, v)| k.len() + v.len() + 2).sum::<usize>();
        eprintln!("{}", too_long(strings));
    } else {
        eprintln!("hotsh: cannot start {}: {error}", shell.display());
    }
    report.exit(127 << 8);
}

/// What a command too long to start is told: with its environment (the `bytes` of the
/// strings `exec` is given) it is over what the system takes for one program.
fn too_long(bytes: usize) -> String {
    format!(
        "hotsh: this command is too long to start: with its environment it takes {bytes} bytes, \
         over what this system takes for one program (`getconf ARG_MAX` in all, 128 KiB for \
         one variable); write it to a file and run the file"
    )
}

/// Starts the shell with `posix_spawn` (a vfork: nothing of the shim is copied), with the
/// shim's descriptors 0 to 2 (the others are close-on-exec), `env` as its whole environment,
/// in a session (and process group) of its own: the command has no controlling terminal of
/// the host's to reach, and its group is the shell's pid. Its signal
/// mask is empty (the shim blocks the signals it reads) and the signals the shim or the agent
/// may ignore are back to their defaults. If the shim is killed, the shell is re-parented to the
/// supervisor, which kills it.
fn spawn_shell(argv: &[OsString], env: &[(OsString, OsString)]) -> std::io::Result<libc::pid_t> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt as _;
    let c_string = |bytes: &[u8]| {
        CString::new(bytes).map_err(|_| std::io::Error::other("an argument contains a NUL byte"))
    };
    let args = argv.iter().map(|a| c_string(a.as_bytes())).collect::<Result<Vec<_>, _>>()?;
    let vars = env
        .iter()
        .map(|(k, v)| c_string(&[k.as_bytes(), b"=", v.as_bytes()].concat()))
        .collect::<Result<Vec<_>, _>>()?;
    let mut arg_ptrs: Vec<*mut libc::c_char> = args.iter().map(|a| a.as_ptr().cast_mut()).collect();
    arg_ptrs.push(std::ptr::null_mut());
    let mut var_ptrs: Vec<*mut libc::c_char> = vars.iter().map(|v| v.as_ptr().cast_mut()).collect();
    var_ptrs.push(std::ptr::null_mut());
    let mut pid: libc::pid_t = 0;
    // SAFETY: the attribute object is initialised before use and destroyed after; every
    // pointer handed to posix_spawn (path, argv, envp: NUL-terminated arrays of C strings)
    // outlives the call.
    let result = unsafe {
        let mut attr: libc::posix_spawnattr_t = std::mem::zeroed();
        libc::posix_spawnattr_init(&mut attr);
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        let mut defaults: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut defaults);
        for signal in DEFAULT_SIGNALS {
            libc::sigaddset(&mut defaults, signal);
        }
        libc::posix_spawnattr_setsigmask(&mut attr, &empty);
        libc::posix_spawnattr_setsigdefault(&mut attr, &defaults);
        libc::posix_spawnattr_setflags(
            &mut attr,
            (libc::POSIX_SPAWN_SETSIGMASK | libc::POSIX_SPAWN_SETSIGDEF) as libc::c_short
                | super::process::SPAWN_NEW_SESSION,
        );
        let result = libc::posix_spawn(
            &mut pid,
            args[0].as_ptr(),
            std::ptr::null(),
            &attr,
            arg_ptrs.as_ptr(),
            var_ptrs.as_ptr(),
        );
        libc::posix_spawnattr_destroy(&mut attr);
        result
    };
    if result != 0 {
        return Err(std::io::Error::from_raw_os_error(result));
    }
    Ok(pid)
}

/// A descriptor of this program that a child keeps across `exec` (for bwrap to run the gate
/// from).
fn inheritable_self() -> std::io::Result<i32> {
    use std::os::fd::IntoRawFd as _;
    let file = std::fs::File::open(super::process::own_executable())?;
    let fd = file.into_raw_fd();
    // SAFETY: clearing close-on-exec on the descriptor just opened.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(fd)
}

/// `__sandboxed POLICY SHELL ARGS…`: the gate inside bwrap. It starts the shell under the
/// command's filter and makes the calls the filter sends it (`sandbox/linux/notify.rs`) from
/// inside the sandbox's namespaces, with the command's own rights (bwrap dropped every
/// capability of both); it exits the way the shell does. The command stays in bwrap's
/// process group, so the shim outside stops both together.
pub(crate) fn sandboxed_main(args: &[OsString]) -> ! {
    super::process::close_inherited(&[], super::process::Inherited::Close);
    // The command may not ptrace the gate that checks it.
    let _ = super::process::become_undumpable();
    let fail = |code: i32, message: String| -> ! {
        eprintln!("hotsh: {message}");
        std::process::exit(code)
    };
    let Some((policy, argv)) = args.split_first().filter(|(_, argv)| !argv.is_empty()) else {
        fail(2, "usage: __sandboxed POLICY SHELL [ARG…]".to_owned());
    };
    let policy: Policy = match policy.to_str().map(serde_json::from_str) {
        Some(Ok(policy)) => policy,
        _ => fail(
            125,
            "the sandbox cannot be enforced, so the command was not run: the gate got no policy"
                .to_owned(),
        ),
    };
    let signals = match SignalFd::new(&[libc::SIGCHLD]) {
        Ok(signals) => signals,
        Err(error) => fail(
            125,
            format!(
                "the sandbox cannot be enforced, so the command was not run: cannot watch signals: {error}"
            ),
        ),
    };
    let env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    let shell = std::path::PathBuf::from(&argv[0]);
    let filters = notify::Filters::for_policy(&policy);
    // Compiled before the fork, as the supervisor does for the shims.
    let _ = notify::programs(filters);
    let (pid, gate) =
        match spawn_gated(argv, &env, &shell, filters, false, &DEFAULT_SIGNALS, too_long) {
            Ok((pid, listener)) => (pid, notify::Gate::new(listener, &policy)),
            Err(Gated::Unenforced(error)) => fail(
                125,
                format!("the sandbox cannot be enforced, so the command was not run: {error}"),
            ),
            Err(Gated::Start(error)) => {
                fail(127, format!("cannot start {}: {error}", shell.display()))
            }
        };
    let mut gate_open = true;
    loop {
        let mut fds = [
            libc::pollfd { fd: signals.fd, events: libc::POLLIN, revents: 0 },
            libc::pollfd {
                fd: if gate_open { gate.fd() } else { -1 },
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: `fds` is a valid array of two pollfd.
        if unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) } < 0 {
            continue;
        }
        if fds[1].revents & libc::POLLIN != 0 {
            gate.answer_one();
        } else if fds[1].revents != 0 {
            gate_open = false;
        }
        if fds[0].revents != 0 {
            signals.read();
            let mut status = 0;
            // SAFETY: a non-blocking wait for our one child, with a valid out pointer.
            if unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == pid {
                exit_like(status);
            }
        }
    }
}

/// Signals the shim or the agent may ignore or handle, back to their defaults in the shell.
const DEFAULT_SIGNALS: [i32; 13] = [
    libc::SIGPIPE,
    libc::SIGXFSZ,
    libc::SIGHUP,
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGTERM,
    libc::SIGCHLD,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGALRM,
    libc::SIGTSTP,
    libc::SIGTTIN,
    libc::SIGTTOU,
];

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

/// The pids whose parent is this process.
pub(super) fn children() -> Vec<libc::pid_t> {
    super::process::children().into_iter().map(|pid| pid as libc::pid_t).collect()
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

/// The program the host starts as its command supervisor.
#[derive(Debug)]
pub(crate) struct Program {
    /// What is executed: `/proc/self/fd/N` for the opened [`PROGRAM`], or `/proc/self/exe`.
    pub(crate) path: std::path::PathBuf,
    /// Its name on disk, as its `argv[0]` (what `ps` shows).
    pub(crate) name: std::path::PathBuf,
    /// Held open so that every shim comes from the file found at start, even after a new build
    /// replaced it on disk (the new one may not understand this host's arguments).
    _file: Option<std::fs::File>,
}

impl Program {
    /// [`PROGRAM`] beside this executable when it is there (it starts in a fraction of the time
    /// a re-executed `hotsh` takes), else this very executable.
    pub(crate) fn find() -> Self {
        use std::os::fd::AsRawFd as _;
        let exe = std::env::current_exe().unwrap_or_else(|_| "hotsh".into());
        let shim = exe.with_file_name(PROGRAM);
        let beside = std::fs::File::open(&shim)
            .ok()
            .filter(|file| file.metadata().is_ok_and(|m| crate::dirs::is_executable(&m)));
        match beside {
            Some(file) => Self {
                path: super::process::descriptor_path(file.as_raw_fd()),
                name: shim,
                _file: Some(file),
            },
            None => Self { path: super::process::own_executable(), name: exe, _file: None },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_too_long_for_one_exec_string_goes_in_parts_the_shell_joins() {
        let env = vec![
            ("PATH".into(), "/usr/bin".into()),
            (format!("{COMMAND_PART}7").into(), "stale".into()),
        ];
        let short: OsString = "echo hi".into();
        assert_eq!(long_command(&short, &env), None, "a command that fits goes as it is");

        let command: OsString = "x".repeat(300_000).into();
        let (script, parts) = long_command(&command, &env).expect("parts");
        let names = |n: usize| format!("{COMMAND_PART}{n}");
        assert_eq!(
            script.to_str().expect("UTF-8"),
            format!(
                "__hotsh_command=\"${0}${1}${2}\"; unset {0} {1} {2}; eval \"unset __hotsh_command; $__hotsh_command\"",
                names(0),
                names(1),
                names(2)
            )
        );
        assert_eq!(parts[0], ("PATH".into(), "/usr/bin".into()), "the rest of the environment");
        let joined: Vec<u8> = parts[1..]
            .iter()
            .enumerate()
            .flat_map(|(n, (name, part))| {
                assert_eq!(name.to_str(), Some(names(n).as_str()), "{name:?}: in order");
                assert!(name.len() + part.len() + 2 <= EXEC_STRING_MAX, "each part fits");
                part.as_encoded_bytes().to_vec()
            })
            .collect();
        assert_eq!(joined, command.as_encoded_bytes(), "the parts are the command");
    }
}
