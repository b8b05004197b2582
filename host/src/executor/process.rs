//! The host's child processes: handles that cannot signal a recycled pid, the set of children
//! the host started, and the sweeper that kills every other process that becomes the host's
//! child.
//!
//! The host is a *child subreaper*, like each shim and the command supervisor. Normally a
//! command's leftovers are re-parented to its shim, which kills them, and what a killed shim
//! leaves behind to the supervisor, which kills it. But a command can kill the supervisor
//! itself: its shims are then re-parented to the host instead of to init. The host is told (a
//! SIGCHLD for the supervisor's death arrives after the re-parenting), looks at its children,
//! and kills and reaps every one it did not start itself. So no death along the way frees
//! anything.

use crate::sync::lock;
use std::collections::BTreeSet;
use std::os::fd::{AsRawFd as _, OwnedFd};
use std::sync::Mutex;
use std::time::{Duration, Instant};

// The one seam for what Linux alone has (ARCHITECTURE.md, "Platforms").
#[cfg(target_os = "linux")]
#[path = "process/linux.rs"]
mod os;
#[cfg(not(target_os = "linux"))]
#[path = "process/other.rs"]
mod os;
pub(crate) use os::{
    SOCKET_FLAGS, SPAWN_NEW_SESSION, SignalFd, anonymous_file, descriptor_path, die_with_parent,
    exists, free_range, own_executable, set_name, wipe_initial_environment,
};

/// Children the host started and has not reaped yet.
static OWN_CHILDREN: Mutex<BTreeSet<u32>> = Mutex::new(BTreeSet::new());

/// Starts a child with `spawn` and records it as the host's own, atomically with respect to
/// the sweeper (which would otherwise see a stranger).
pub(crate) fn spawn_own<T>(
    spawn: impl FnOnce() -> std::io::Result<T>,
    pid_of: impl FnOnce(&T) -> Option<u32>,
) -> std::io::Result<T> {
    let mut own = lock(&OWN_CHILDREN);
    let child = spawn()?;
    if let Some(pid) = pid_of(&child) {
        own.insert(pid);
    }
    Ok(child)
}

/// Forgets a child of the host's own once it has been reaped.
pub(crate) fn reaped(pid: Option<u32>) {
    if let Some(pid) = pid {
        lock(&OWN_CHILDREN).remove(&pid);
    }
}

/// Makes this process a child subreaper. Failing to is an error: without it a command could
/// leave processes behind.
pub(crate) fn become_subreaper() -> std::io::Result<()> {
    os::become_subreaper()
}

/// Descriptors a process inherited without being meant to (what its own parent left open, not
/// close-on-exec) are open in every program it starts: a command could write through one to
/// a file outside the sandbox. `keep` descriptors (above 2) stay as they are; every other one
/// from 3 up is closed, or, with `Inherited::CloseOnExec`, only kept from the next `exec`.
pub(crate) fn close_inherited(keep: &[i32], how: Inherited) {
    let mut keep: Vec<u32> = keep.iter().filter(|&&fd| fd > 2).map(|&fd| fd as u32).collect();
    keep.sort_unstable();
    let mut from = 3u32;
    for fd in keep.into_iter().chain([u32::MAX]) {
        if fd > from {
            os::close_range(from, fd - 1, how == Inherited::CloseOnExec);
        }
        from = fd.saturating_add(1);
    }
}

/// What [`close_inherited`] does with a descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Inherited {
    Close,
    /// For a process that still uses its descriptors (the host, a shim before it starts the
    /// shell): only its children lose them.
    CloseOnExec,
}

/// Makes this process non-dumpable, as ssh-agent does: another process of the same user can
/// then neither read `/proc/<pid>/environ` (the model keys the scrub keeps from commands) nor
/// `/proc/<pid>/mem`, nor attach a debugger.
pub(crate) fn become_undumpable() -> std::io::Result<()> {
    os::become_undumpable()
}

/// Raises the soft limit on open files to the hard limit: every running command holds a few
/// descriptors, and the common soft limit of 1024 is reached by a few hundred tasks.
pub(crate) fn raise_open_file_limit() {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: valid pointers to an rlimit.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max
        {
            limit.rlim_cur = limit.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                tracing::debug!(error = %std::io::Error::last_os_error(), "cannot raise the open file limit");
            }
        }
    }
}

/// Sweeps on every SIGCHLD, for as long as the runtime runs.
pub(crate) fn spawn_sweeper() -> std::io::Result<()> {
    let mut signals = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child())?;
    tokio::spawn(async move {
        while signals.recv().await.is_some() {
            sweep();
        }
    });
    Ok(())
}

/// Kills and reaps every child of this process that the host did not start. Returns how many
/// strangers were found.
pub(crate) fn sweep() -> usize {
    let own = lock(&OWN_CHILDREN);
    let strangers: Vec<u32> = children().into_iter().filter(|pid| !own.contains(pid)).collect();
    for &pid in &strangers {
        tracing::debug!(pid, "a process was re-parented to the host; killing it");
        // SAFETY: the pid is our child and not reaped (it is still listed), so it cannot have
        // been recycled; kill and a non-blocking wait on it are harmless if it is a zombie.
        unsafe {
            libc::kill(pid as libc::pid_t, libc::SIGKILL);
            let mut status = 0;
            libc::waitpid(pid as libc::pid_t, &mut status, libc::WNOHANG);
        }
    }
    strangers.len()
}

/// Sweeps until no stranger is left or `within` has passed (for shutdown: a killed stranger's
/// own children reach the host a moment later).
pub(crate) fn sweep_until_clear(within: Duration) {
    let deadline = Instant::now() + within;
    while sweep() > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The pids of this process's children.
pub(crate) fn children() -> Vec<u32> {
    let mut pids = os::children();
    pids.sort_unstable();
    pids.dedup();
    pids
}

/// A process handle that cannot be confused with a later process of the same pid.
#[derive(Debug)]
pub(crate) struct Pidfd(OwnedFd);

impl From<OwnedFd> for Pidfd {
    /// A pidfd received from another process (the supervisor opens its shims').
    fn from(fd: OwnedFd) -> Self {
        Self(fd)
    }
}

impl std::os::fd::AsFd for Pidfd {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.0.as_fd()
    }
}

impl Pidfd {
    pub(crate) fn open(pid: u32) -> std::io::Result<Self> {
        os::pidfd_open(pid).map(Self)
    }

    /// The process's pid in this process's pid namespace, from the pidfd's `fdinfo` (for a
    /// pidfd opened inside another namespace, whose pid numbers mean nothing here); `None`
    /// once it has been reaped or when the kernel does not say.
    pub(crate) fn host_pid(&self) -> Option<u32> {
        os::pidfd_pid(self.0.as_raw_fd())
    }

    /// True once the process has ended (without waiting).
    pub(crate) fn has_exited(&self) -> bool {
        let mut fds = [libc::pollfd { fd: self.0.as_raw_fd(), events: libc::POLLIN, revents: 0 }];
        // SAFETY: one valid pollfd, no wait.
        unsafe { libc::poll(fds.as_mut_ptr(), 1, 0) > 0 }
    }

    /// Sends `signal`; an already ended process is not an error.
    pub(crate) fn signal(&self, signal: i32) {
        os::pidfd_signal(self.0.as_raw_fd(), signal);
    }

    /// Waits until the process has ended (not reaped), at most `timeout`. True if it ended.
    pub(crate) fn wait_exit(&self, timeout: Duration) -> bool {
        wait_readable(self.0.as_raw_fd(), Instant::now() + timeout).unwrap_or(false)
    }
}

/// Waits until `fd` is readable (or hung up) or `deadline` passes: true if it is. A signal
/// that interrupts the wait does not end it (the host gets SIGCHLD whenever a stranger is
/// re-parented to it), nor does it shorten it.
pub(crate) fn wait_readable(fd: std::os::fd::RawFd, deadline: Instant) -> std::io::Result<bool> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let mut fds = [libc::pollfd { fd, events: libc::POLLIN, revents: 0 }];
        // Rounded up: a wait of less than a millisecond is not a busy loop.
        let ms = left.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), 1, ms) };
        if ready > 0 {
            return Ok(true);
        }
        if ready == 0 {
            if left.is_zero() {
                return Ok(false);
            }
            continue;
        }
        let error = std::io::Error::last_os_error();
        if error.kind() != std::io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}

/// How the host reaches one of its shims: through a pidfd when the kernel has them (a pid
/// may be recycled once the shim is reaped), else by pid. Released once the shim is gone:
/// its pidfd is closed then (a host running hundreds of tasks keeps no descriptor per ended
/// one) and nothing signals it any more.
#[derive(Debug)]
pub(crate) struct ProcessHandle {
    reach: std::sync::Mutex<Option<Reach>>,
}

#[derive(Debug)]
struct Reach {
    pid: Option<u32>,
    pidfd: Option<Pidfd>,
}

impl ProcessHandle {
    /// A shim the supervisor started, with the pidfd it opened for it (none on kernels
    /// without pidfds).
    pub(crate) fn supervised(pid: Option<u32>, pidfd: Option<Pidfd>) -> Self {
        Self { reach: std::sync::Mutex::new(Some(Reach { pid, pidfd })) }
    }

    /// A handle that reaches nothing (for tests).
    #[cfg(test)]
    pub(crate) fn detached() -> Self {
        Self { reach: std::sync::Mutex::new(None) }
    }

    pub(crate) fn pid(&self) -> Option<u32> {
        crate::sync::lock(&self.reach).as_ref().and_then(|reach| reach.pid)
    }

    /// The shim ended and was waited for: its pidfd is closed, and it is not signalled again.
    pub(crate) fn release(&self) {
        crate::sync::lock(&self.reach).take();
    }

    pub(crate) fn signal(&self, signal: i32) {
        let reach = crate::sync::lock(&self.reach);
        let Some(reach) = reach.as_ref() else { return };
        match (&reach.pidfd, reach.pid) {
            (Some(pidfd), _) => pidfd.signal(signal),
            // SAFETY: a signal to our own child; ESRCH if it is already gone.
            (None, Some(pid)) => unsafe {
                libc::kill(pid as libc::pid_t, signal);
            },
            (None, None) => {}
        }
    }
}
