//! A call a confined command made that its shim answers for it (the gate in `notify.rs`):
//! whose it is and what it names (`Target`, reading the command's memory once), and how it
//! is answered (`Answer`). The vocabulary the gate and its checks (`names.rs`, `sockets.rs`)
//! share; it imports none of them.

use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd, RawFd};

/// How the shim answers one call.
pub(crate) enum Answer {
    /// The call's return value.
    Value(i64),
    /// It failed with this errno.
    Error(i32),
    /// It opened this file: the command gets a descriptor for it (close-on-exec if asked).
    Descriptor { file: OwnedFd, close_on_exec: bool },
    /// It must wait (a FIFO's blocking open): the work runs on a thread of its own, which
    /// answers when it is done, so that the command's other calls are not held up.
    Later(Box<dyn FnOnce() -> Answer + Send>),
}

/// The process (and the call) a notification is about.
pub(crate) struct Target {
    pub(crate) pid: libc::pid_t,
    pidfd: OwnedFd,
    listener: RawFd,
    id: u64,
}

impl Target {
    pub(super) fn of(listener: RawFd, notification: &libc::seccomp_notif) -> Result<Self, i32> {
        let pid = notification.pid as libc::pid_t;
        // SAFETY: pidfd_open with a pid and no flags.
        let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if pidfd < 0 {
            return Err(libc::ESRCH);
        }
        // SAFETY: the kernel just returned this descriptor.
        let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd as RawFd) };
        let target = Self { pid, pidfd, listener, id: notification.id };
        // The pid was the caller's when the notification came; still so now?
        target.still_valid()?;
        Ok(target)
    }

    /// Still the same call of the same process (its pid was not reused meanwhile).
    pub(crate) fn still_valid(&self) -> Result<(), i32> {
        let mut id = self.id;
        // SAFETY: ID_VALID reads the u64 we own.
        let valid =
            unsafe { libc::ioctl(self.listener, libc::SECCOMP_IOCTL_NOTIF_ID_VALID, &mut id) == 0 };
        if valid { Ok(()) } else { Err(libc::ESRCH) }
    }

    /// `length` bytes of the command's memory at `address`, copied once.
    pub(crate) fn read(&self, address: u64, length: usize) -> Result<Vec<u8>, i32> {
        let mut bytes = vec![0u8; length];
        if length == 0 {
            return Ok(bytes);
        }
        let local = libc::iovec { iov_base: bytes.as_mut_ptr().cast(), iov_len: length };
        let remote = libc::iovec { iov_base: address as *mut libc::c_void, iov_len: length };
        // SAFETY: copies at most `length` bytes of the command's memory into our buffer.
        let copied = unsafe { libc::process_vm_readv(self.pid, &local, 1, &remote, 1, 0) };
        if copied != length as isize {
            return Err(libc::EFAULT);
        }
        self.still_valid()?;
        Ok(bytes)
    }

    /// The NUL-terminated string at `address` (a path: at most `PATH_MAX` bytes), copied once.
    pub(crate) fn read_path(&self, address: u64) -> Result<Vec<u8>, i32> {
        if address == 0 {
            return Err(libc::EFAULT);
        }
        const PAGE: u64 = 4096;
        let mut path = Vec::new();
        let mut at = address;
        while path.len() < libc::PATH_MAX as usize {
            // Up to the end of the page: the next one may not be mapped.
            let chunk = (PAGE - at % PAGE) as usize;
            let bytes = self.read(at, chunk)?;
            if let Some(end) = bytes.iter().position(|&b| b == 0) {
                path.extend_from_slice(&bytes[..end]);
                return Ok(path);
            }
            path.extend_from_slice(&bytes);
            at += chunk as u64;
        }
        Err(libc::ENAMETOOLONG)
    }

    /// A copy of the command's descriptor `fd`.
    pub(crate) fn descriptor(&self, fd: i32) -> Result<OwnedFd, i32> {
        // SAFETY: pidfd_getfd duplicates the command's descriptor into this process.
        let copy = unsafe { libc::syscall(libc::SYS_pidfd_getfd, self.pidfd.as_raw_fd(), fd, 0) };
        if copy < 0 {
            return Err(errno());
        }
        // SAFETY: the kernel just returned this descriptor.
        Ok(unsafe { OwnedFd::from_raw_fd(copy as RawFd) })
    }

    /// The directory a `*at` call's `dirfd` names: the command's working directory for
    /// `AT_FDCWD`, else a copy of its descriptor.
    pub(crate) fn directory(&self, dirfd: u64) -> Result<OwnedFd, i32> {
        let dirfd = dirfd as i32;
        if dirfd == libc::AT_FDCWD {
            use rustix::fs::{Mode, OFlags};
            let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
            return rustix::fs::open(format!("/proc/{}/cwd", self.pid), flags, Mode::empty())
                .map_err(|e| e.raw_os_error());
        }
        self.descriptor(dirfd)
    }

    /// The command's umask.
    pub(crate) fn umask(&self) -> Result<u32, i32> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid))
            .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
        status
            .lines()
            .find_map(|line| line.strip_prefix("Umask:"))
            .and_then(|mask| u32::from_str_radix(mask.trim(), 8).ok())
            .ok_or(libc::EIO)
    }
}

pub(crate) fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)
}
