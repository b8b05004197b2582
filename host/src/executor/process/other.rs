//! The process seam on a system other than Linux (ARCHITECTURE.md, "Platforms"): what POSIX
//! gives is done with it; what it does not is refused with [`unsupported`], so a build for
//! such a system compiles, serves ACP, and says which piece a port still has to write here
//! (on macOS: kqueue's `EVFILT_PROC` and `EVFILT_SIGNAL` for pidfds and signalfd,
//! `proc_listchildpids` for the children, process groups for the subreaper). Nothing here is
//! used on Linux.

use std::ffi::{CStr, OsString};
use std::os::fd::{OwnedFd, RawFd};
use std::path::PathBuf;

/// The error for a primitive this system lacks.
fn unsupported(what: &str) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        format!("{what} is not available on this system (hotsh's executor is built for Linux)"),
    )
}

pub(crate) fn become_subreaper() -> std::io::Result<()> {
    Err(unsupported("a child subreaper"))
}

pub(crate) fn become_undumpable() -> std::io::Result<()> {
    Err(unsupported("a non-dumpable process"))
}

/// Process names are cosmetic: left as they are.
pub(crate) fn set_name(_name: &CStr) {}

/// Not available: a process started by the host outlives it if the host is killed.
pub(crate) fn die_with_parent() {}

/// Closes (or marks close-on-exec) the descriptors `from..=to`, one by one up to the limit
/// on open files.
pub(crate) fn close_range(from: u32, to: u32, close_on_exec: bool) {
    // SAFETY: sysconf has no preconditions.
    let limit = unsafe { libc::sysconf(libc::_SC_OPEN_MAX) };
    let last = to.min(u32::try_from(limit).unwrap_or(1024).saturating_sub(1));
    for fd in from..=last {
        // SAFETY: closing or flagging descriptors this process owns; a closed one is EBADF.
        unsafe {
            if close_on_exec {
                libc::fcntl(fd as RawFd, libc::F_SETFD, libc::FD_CLOEXEC);
            } else {
                libc::close(fd as RawFd);
            }
        }
    }
}

/// No pidfds: processes are reached by pid ([`super::ProcessHandle`] does without).
pub(crate) fn pidfd_open(_pid: u32) -> std::io::Result<OwnedFd> {
    Err(unsupported("a process descriptor"))
}

pub(crate) fn pidfd_pid(_pidfd: RawFd) -> Option<u32> {
    None
}

pub(crate) fn pidfd_signal(_pidfd: RawFd, _signal: i32) {}

/// Not listed here: the sweep finds no stranger.
pub(crate) fn children() -> Vec<u32> {
    Vec::new()
}

/// True while a process `pid` exists (`kill(pid, 0)`: it exists unless `ESRCH`).
pub(crate) fn exists(pid: u32) -> bool {
    // SAFETY: signal 0 sends nothing.
    let sent = unsafe { libc::kill(pid as libc::pid_t, 0) };
    sent == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// An unnamed temporary file, already unlinked.
pub(crate) fn anonymous_file(_name: &CStr) -> std::io::Result<std::fs::File> {
    tempfile::tempfile()
}

pub(crate) fn descriptor_path(fd: RawFd) -> PathBuf {
    PathBuf::from(format!("/dev/fd/{fd}"))
}

/// This program's path on disk (a newer build there is what runs).
pub(crate) fn own_executable() -> PathBuf {
    std::env::current_exe().unwrap_or_else(|_| PathBuf::from("hotsh"))
}

pub(crate) fn wipe_initial_environment(_names: &[&OsString]) -> std::io::Result<()> {
    Err(unsupported("rewriting the initial environment block"))
}

/// Signals delivered through a descriptor: not available here (kqueue's `EVFILT_SIGNAL` on
/// macOS).
pub(crate) struct SignalFd {
    pub(crate) fd: i32,
}

impl SignalFd {
    pub(crate) fn new(_signals: &[i32]) -> std::io::Result<Self> {
        Err(unsupported("a signal descriptor"))
    }

    pub(crate) fn read(&self) -> Vec<i32> {
        Vec::new()
    }
}

/// No `SOCK_CLOEXEC` everywhere: a port marks the pair close-on-exec itself.
pub(crate) const SOCKET_FLAGS: rustix::net::SocketFlags = rustix::net::SocketFlags::empty();

/// Not every `posix_spawn` has `POSIX_SPAWN_SETSID` (macOS: 0x400 since 10.15).
pub(crate) const SPAWN_NEW_SESSION: libc::c_short = 0;

pub(crate) fn free_range(
    _file: std::os::fd::BorrowedFd<'_>,
    _offset: u64,
    _len: u64,
) -> std::io::Result<()> {
    Err(unsupported("punching a hole in a file"))
}
