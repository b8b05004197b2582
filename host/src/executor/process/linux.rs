//! Linux's side of the process seam (ARCHITECTURE.md, "Platforms"): every call the executor
//! makes that Linux alone has — `prctl`, pidfds, `close_range`, `signalfd`, `memfd`, and the
//! `/proc` files that list a process's children and its environment block. The rest of the
//! executor calls these through `process.rs` and nothing else of Linux's.

use std::ffi::{CStr, OsString};
use std::os::fd::{FromRawFd as _, OwnedFd, RawFd};
use std::path::PathBuf;

/// A `prctl` with one argument.
fn prctl(option: libc::c_int, argument: libc::c_ulong) -> std::io::Result<()> {
    // SAFETY: the options used here take one integer (or a C string pointer the caller keeps
    // alive) and no other memory.
    if unsafe { libc::prctl(option, argument, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Makes this process a child subreaper: orphans of its descendants come to it, not to init.
pub(crate) fn become_subreaper() -> std::io::Result<()> {
    prctl(libc::PR_SET_CHILD_SUBREAPER, 1)
}

/// Makes this process non-dumpable: no other process of the user reads its memory or
/// `/proc/<pid>/environ`, or attaches a debugger.
pub(crate) fn become_undumpable() -> std::io::Result<()> {
    prctl(libc::PR_SET_DUMPABLE, 0)
}

/// Names this process as `ps` shows it (and `/proc/<pid>/comm`); cosmetic, so a failure is
/// ignored.
pub(crate) fn set_name(name: &CStr) {
    let _ = prctl(libc::PR_SET_NAME, name.as_ptr() as libc::c_ulong);
}

/// Has this process killed when its parent ends.
pub(crate) fn die_with_parent() {
    let _ = prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
}

/// Closes (or marks close-on-exec) the descriptors `from..=to`.
pub(crate) fn close_range(from: u32, to: u32, close_on_exec: bool) {
    let flags = if close_on_exec { libc::CLOSE_RANGE_CLOEXEC } else { 0 };
    // SAFETY: close_range on descriptors this process owns; it has no other effect.
    unsafe { libc::syscall(libc::SYS_close_range, from, to, flags) };
}

/// A pidfd for `pid` (Linux 5.3).
pub(crate) fn pidfd_open(pid: u32) -> std::io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags; the result is a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a new descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// The pid, in this process's namespace, of the process `pidfd` refers to (its `fdinfo`).
pub(crate) fn pidfd_pid(pidfd: RawFd) -> Option<u32> {
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{pidfd}")).ok()?;
    let pid = info.lines().find_map(|line| line.strip_prefix("Pid:"))?.trim();
    pid.parse::<i64>().ok().filter(|&pid| pid > 0).map(|pid| pid as u32)
}

/// Sends `signal` through `pidfd`; an already ended process is not an error.
pub(crate) fn pidfd_signal(pidfd: RawFd, signal: i32) {
    // SAFETY: a valid pidfd; a null siginfo means "as kill(2) would".
    unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd,
            signal,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        );
    }
}

/// The pids of this process's children, from `/proc/self/task/*/children` (each thread's
/// children), or from every process's parent when that file is not available.
pub(crate) fn children() -> Vec<u32> {
    let mut pids = Vec::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return pids;
    };
    let mut listed = false;
    for task in tasks.flatten() {
        if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
            listed = true;
            pids.extend(text.split_whitespace().filter_map(|p| p.parse::<u32>().ok()));
        }
    }
    if !listed {
        let own = std::process::id();
        pids = std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter(|&pid| parent_of(pid) == Some(own))
            .collect();
    }
    pids
}

/// The parent of `pid`, from `/proc/<pid>/stat`.
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid …`; comm may contain spaces and parentheses: split at the last ')'.
    let after = &stat[stat.iter().rposition(|&b| b == b')')? + 1..];
    let mut fields = after.split(|&b| b == b' ').filter(|f| !f.is_empty());
    fields.next()?; // state
    std::str::from_utf8(fields.next()?).ok()?.parse().ok()
}

/// True while a process `pid` exists (a zombie included).
pub(crate) fn exists(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// A file in memory only, close-on-exec, named `name` for `/proc/<pid>/fd` listings.
pub(crate) fn anonymous_file(name: &CStr) -> std::io::Result<std::fs::File> {
    // SAFETY: a valid C string and flags; the result is a new descriptor or -1.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a new descriptor nothing else owns.
    Ok(unsafe { std::fs::File::from_raw_fd(fd) })
}

/// A path that opens (or executes) what this process's descriptor `fd` refers to.
pub(crate) fn descriptor_path(fd: RawFd) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{fd}"))
}

/// A path that executes this very program as it was started, even once a new build has
/// replaced it on disk.
pub(crate) fn own_executable() -> PathBuf {
    PathBuf::from("/proc/self/exe")
}

/// Zeroes the entries of `names` in the environment block the process started with (the
/// range `/proc/self/stat` gives as `env_start`..`env_end`; `remove_var` only takes them
/// out of the list libc keeps, not out of that memory, which `/proc/<pid>/environ` shows).
pub(crate) fn wipe_initial_environment(names: &[&OsString]) -> std::io::Result<()> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    // Fields are numbered from 1 and the first two (pid, comm) end at the `)`: field N is
    // at N - 3 here. env_start and env_end are fields 50 and 51.
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<usize>().ok());
    let (Some(start), Some(end)) = (field(50), field(51)) else {
        return Err(std::io::Error::other("no environment range in /proc/self/stat"));
    };
    let block = std::fs::read("/proc/self/environ")?;
    if block.len() > end.saturating_sub(start) {
        return Err(std::io::Error::other("the environment block is not where the kernel says"));
    }
    // Written through /proc/self/mem: the kernel checks the range, and no Rust reference
    // to that memory exists to be surprised.
    use std::os::unix::fs::FileExt as _;
    let memory = std::fs::OpenOptions::new().write(true).open("/proc/self/mem")?;
    let mut offset = 0;
    for entry in block.split(|&b| b == 0) {
        let name = entry.split(|&b| b == b'=').next().unwrap_or_default();
        if names.iter().any(|hidden| hidden.as_encoded_bytes() == name) {
            // No environment list of libc's points at it any more (removed by the caller).
            memory.write_all_at(&vec![0; entry.len()], (start + offset) as u64)?;
        }
        offset += entry.len() + 1;
    }
    Ok(())
}

/// Blocked signals delivered through a file descriptor (`signalfd`), polled with the rest.
pub(crate) struct SignalFd {
    pub(crate) fd: i32,
}

impl SignalFd {
    /// Blocks `signals` in this thread and delivers them through the descriptor.
    pub(crate) fn new(signals: &[i32]) -> std::io::Result<Self> {
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
    pub(crate) fn read(&self) -> Vec<i32> {
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

/// Flags for the host's socket pairs: close-on-exec as they are made.
pub(crate) const SOCKET_FLAGS: rustix::net::SocketFlags = rustix::net::SocketFlags::CLOEXEC;

/// `posix_spawn`'s flag for a shell in a session of its own.
pub(crate) const SPAWN_NEW_SESSION: libc::c_short = libc::POSIX_SPAWN_SETSID as libc::c_short;

/// Gives back the memory of `len` bytes of `file` from `offset` (a hole punched in a memory
/// file; the size stays).
pub(crate) fn free_range(
    file: std::os::fd::BorrowedFd<'_>,
    offset: u64,
    len: u64,
) -> std::io::Result<()> {
    use rustix::fs::FallocateFlags;
    let flags = FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE;
    rustix::fs::fallocate(file, flags, offset, len)?;
    Ok(())
}
