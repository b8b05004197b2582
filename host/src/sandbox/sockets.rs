//! Unix sockets with the network off: a command may connect to a socket file inside the
//! session's writable roots (its own test server, say) and to nothing else (the Docker socket,
//! a tmux server, ssh-agent or a D-Bus bus would each be a way out).
//!
//! Neither Landlock (before the `RESOLVE_UNIX` right, which this kernel's ABI may lack) nor a
//! read-only mount stops `connect` to a socket file, and a seccomp filter cannot read the path
//! a `connect` names. So the command's `connect` goes to its shim through seccomp's user
//! notification, and the shim connects *for* it: it copies the address out of the command's
//! memory once, finds the socket file the way the kernel would (from the command's root or
//! working directory), checks where that file is, and connects its own copy of the command's
//! socket (`pidfd_getfd`) to it through a descriptor (`/proc/self/fd/N`). The command's
//! memory is never read again, so a thread that changes the address after the check changes
//! nothing (a notification answered "go on" would be read twice by the kernel).
//!
//! The rest of the filter keeps an address from being named any other way: datagram Unix
//! sockets (whose `sendto` names its peer on each call) cannot be made. An abstract address
//! is connected under the same Landlock scope as the command (the shim shares its domain);
//! under bubblewrap, whose network namespace the shim is not in, it is refused.

use super::Policy;
use std::ffi::OsStr;
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt as _;

/// A file's identity: device and inode.
type Identity = (u64, u64);

/// What the shim needs to answer a command's `connect`.
#[derive(Debug)]
pub(crate) struct ConnectGate {
    listener: OwnedFd,
    /// The directories a socket may be beneath ([`Policy::sockets`]) and the read-only paths,
    /// by identity (the same under bubblewrap, whose binds keep device and inode).
    allowed: Vec<Identity>,
    read_only: Vec<Identity>,
    /// Abstract addresses can be connected here (Landlock: the shim is in the command's
    /// domain and network namespace); under bubblewrap they cannot.
    abstract_addresses: bool,
}

/// Installs, in the process about to become the command (after `fork`, before `exec`), the
/// filter that sends its `connect` calls to the shim and refuses datagram Unix sockets; returns
/// the notification descriptor for the shim.
pub(crate) fn install_filter() -> Result<OwnedFd, String> {
    use seccompiler::{
        BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
        SeccompRule,
    };
    let error = |e: seccompiler::BackendError| format!("cannot build the socket filter: {e}");
    // `type & 0xf` (flags such as SOCK_CLOEXEC above it): SOCK_DGRAM, and SOCK_RAW, which Unix
    // sockets treat as datagrams.
    let datagram = |arg: u8, socket_type: i32| {
        SeccompCondition::new(
            arg,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::MaskedEq(0xf),
            socket_type as u64,
        )
        .map_err(error)
    };
    let unix =
        SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, 1).map_err(error)?;
    let socket_rules = vec![
        SeccompRule::new(vec![unix.clone(), datagram(1, libc::SOCK_DGRAM)?]).map_err(error)?,
        SeccompRule::new(vec![unix, datagram(1, libc::SOCK_RAW)?]).map_err(error)?,
    ];
    let pair_rules = vec![
        SeccompRule::new(vec![datagram(1, libc::SOCK_DGRAM)?]).map_err(error)?,
        SeccompRule::new(vec![datagram(1, libc::SOCK_RAW)?]).map_err(error)?,
    ];
    let arch = std::env::consts::ARCH
        .try_into()
        .map_err(|e| format!("no seccomp filter for this architecture: {e}"))?;
    // Two filters' worth of rules in one: `connect` traps (made a notification below), the
    // datagram sockets fail with EPERM.
    let trap = SeccompFilter::new(
        [(libc::SYS_connect, vec![])].into_iter().collect(),
        SeccompAction::Allow,
        SeccompAction::Trap,
        arch,
    )
    .map_err(error)?;
    let refuse = SeccompFilter::new(
        [(libc::SYS_socket, socket_rules), (libc::SYS_socketpair, pair_rules)]
            .into_iter()
            .collect(),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(error)?;
    let refuse: BpfProgram = refuse.try_into().map_err(|e: seccompiler::BackendError| error(e))?;
    seccompiler::apply_filter(&refuse)
        .map_err(|e| format!("cannot apply the socket filter: {e}"))?;
    let mut trap: BpfProgram = trap.try_into().map_err(|e: seccompiler::BackendError| error(e))?;
    // seccompiler has no user-notification action: its "trap" returns become ones.
    const BPF_RET_K: u16 = 0x06;
    for instruction in &mut trap {
        if instruction.code == BPF_RET_K && instruction.k == libc::SECCOMP_RET_TRAP {
            instruction.k = libc::SECCOMP_RET_USER_NOTIF;
        }
    }
    let program = libc::sock_fprog {
        len: trap.len() as u16,
        filter: trap.as_mut_ptr().cast::<libc::sock_filter>(),
    };
    // SAFETY: `program` points at `trap`, a valid BPF program that outlives the call;
    // no_new_privs is set (by `apply_filter` above).
    let listener = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
            &program as *const libc::sock_fprog,
        )
    };
    if listener < 0 {
        return Err(format!(
            "cannot ask for the command's connect calls (seccomp user notification, Linux 5.5): {}",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: the kernel just returned this descriptor to us.
    Ok(unsafe { OwnedFd::from_raw_fd(listener as RawFd) })
}

impl ConnectGate {
    pub(crate) fn new(listener: OwnedFd, policy: &Policy) -> Self {
        let identities = |paths: &[std::path::PathBuf]| -> Vec<Identity> {
            paths
                .iter()
                .filter_map(|path| {
                    use std::os::unix::fs::MetadataExt as _;
                    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
                })
                .collect()
        };
        Self {
            listener,
            allowed: identities(&policy.sockets),
            read_only: identities(&policy.read_only),
            abstract_addresses: policy.bwrap.is_none(),
        }
    }

    pub(crate) fn fd(&self) -> RawFd {
        self.listener.as_raw_fd()
    }

    /// Answers one `connect` of the command (call when the descriptor is readable).
    pub(crate) fn answer_one(&self) {
        // SAFETY: a zeroed seccomp_notif is what RECV expects to fill.
        let mut notification: libc::seccomp_notif = unsafe { std::mem::zeroed() };
        // SAFETY: RECV writes one notification into the struct we own.
        let received =
            unsafe { libc::ioctl(self.fd(), libc::SECCOMP_IOCTL_NOTIF_RECV, &mut notification) };
        if received != 0 {
            // The command was interrupted meanwhile (its call is gone), or nothing waits.
            return;
        }
        let errno = match self.connect_for(&notification) {
            Ok(()) => 0,
            Err(errno) => errno,
        };
        let mut response =
            libc::seccomp_notif_resp { id: notification.id, val: 0, error: -errno, flags: 0 };
        // SAFETY: SEND reads the response we own. A command gone meanwhile makes it fail
        // (ENOENT), which needs nothing.
        unsafe { libc::ioctl(self.fd(), libc::SECCOMP_IOCTL_NOTIF_SEND, &mut response) };
    }

    /// Still the same call of the same process (its pid was not reused meanwhile).
    fn still_valid(&self, id: u64) -> bool {
        let mut id = id;
        // SAFETY: ID_VALID reads the u64 we own.
        unsafe { libc::ioctl(self.fd(), libc::SECCOMP_IOCTL_NOTIF_ID_VALID, &mut id) == 0 }
    }

    /// Does the command's `connect(fd, address, length)` or says why not (an errno).
    fn connect_for(&self, notification: &libc::seccomp_notif) -> Result<(), i32> {
        let pid = notification.pid as libc::pid_t;
        let [fd, address, length, ..] = notification.data.args;
        // SAFETY: pidfd_open with a pid and no flags.
        let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if pidfd < 0 {
            return Err(libc::ESRCH);
        }
        // SAFETY: the kernel just returned this descriptor.
        let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd as RawFd) };
        if !self.still_valid(notification.id) {
            return Err(libc::ESRCH);
        }
        let length = usize::try_from(length).map_err(|_| libc::EINVAL)?;
        if length < 2 || length > std::mem::size_of::<libc::sockaddr_un>() {
            return Err(libc::EINVAL);
        }
        let mut bytes = vec![0u8; length];
        let local = libc::iovec { iov_base: bytes.as_mut_ptr().cast(), iov_len: length };
        let remote = libc::iovec { iov_base: address as *mut libc::c_void, iov_len: length };
        // SAFETY: copies `length` bytes of the command's memory into our buffer of that size.
        let copied = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
        if copied != length as isize {
            return Err(libc::EFAULT);
        }
        if !self.still_valid(notification.id) {
            return Err(libc::ESRCH);
        }
        // SAFETY: pidfd_getfd duplicates the command's descriptor into this process.
        let socket =
            unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd as i32, 0) };
        if socket < 0 {
            return Err(errno());
        }
        // SAFETY: the kernel just returned this descriptor.
        let socket = unsafe { OwnedFd::from_raw_fd(socket as RawFd) };
        if socket_domain(&socket) != Some(libc::AF_UNIX) {
            // No other socket can be made with the network off.
            return Err(libc::EPERM);
        }
        let family = u16::from_ne_bytes([bytes[0], bytes[1]]);
        if i32::from(family) != libc::AF_UNIX {
            return Err(libc::EINVAL);
        }
        let path = &bytes[2..];
        if path.first() == Some(&0) {
            if !self.abstract_addresses {
                return Err(libc::EPERM);
            }
            // An abstract name: the shim's own Landlock scope decides, as it would the
            // command's.
            return connect_raw(&socket, &bytes);
        }
        let path = path.split(|&b| b == 0).next().unwrap_or_default();
        let target = self.find_socket(pid, OsStr::from_bytes(path))?;
        let by_descriptor = format!("/proc/self/fd/{}", target.as_raw_fd());
        connect_path(&socket, by_descriptor.as_bytes())
    }

    /// The socket file `path` names for process `pid` (from its root, or its working
    /// directory when relative), if it lies beneath an allowed directory and in no read-only
    /// path.
    fn find_socket(&self, pid: libc::pid_t, path: &OsStr) -> Result<OwnedFd, i32> {
        use rustix::fs::{AtFlags, Mode, OFlags, ResolveFlags};
        let flags = OFlags::PATH | OFlags::CLOEXEC;
        let start = if path.as_bytes().starts_with(b"/") { "root" } else { "cwd" };
        let base = rustix::fs::open(format!("/proc/{pid}/{start}"), flags, Mode::empty())
            .map_err(|e| e.raw_os_error())?;
        let resolve = if start == "root" {
            ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS
        } else {
            ResolveFlags::NO_MAGICLINKS
        };
        let (directory, name) = match path.as_bytes().iter().rposition(|&b| b == b'/') {
            Some(0) => (OsStr::new("/"), OsStr::from_bytes(&path.as_bytes()[1..])),
            Some(at) => (
                OsStr::from_bytes(&path.as_bytes()[..at]),
                OsStr::from_bytes(&path.as_bytes()[at + 1..]),
            ),
            None => (OsStr::new("."), path),
        };
        let directory = rustix::fs::openat2(
            &base,
            directory,
            flags | OFlags::DIRECTORY,
            Mode::empty(),
            resolve,
        )
        .map_err(|e| e.raw_os_error())?;
        let stat = rustix::fs::statat(&directory, name, AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|e| e.raw_os_error())?;
        if stat.st_mode & libc::S_IFMT != libc::S_IFSOCK {
            // A link to a socket elsewhere, or no socket: refused either way (the kernel
            // would answer ECONNREFUSED for a file that is not a socket).
            return Err(if stat.st_mode & libc::S_IFMT == libc::S_IFLNK {
                libc::EPERM
            } else {
                libc::ECONNREFUSED
            });
        }
        if !self.inside_allowed(&directory) {
            return Err(libc::EPERM);
        }
        rustix::fs::openat(&directory, name, flags | OFlags::NOFOLLOW, Mode::empty())
            .map_err(|e| e.raw_os_error())
    }

    /// Whether `directory` is an allowed directory or beneath one, and not in a read-only path:
    /// its ancestors are walked up (`..`) to the top of the tree it is in.
    fn inside_allowed(&self, directory: &OwnedFd) -> bool {
        use rustix::fs::{Mode, OFlags};
        let identity = |fd: &OwnedFd| rustix::fs::fstat(fd).ok().map(|s| (s.st_dev, s.st_ino));
        let Some(mut current) = identity(directory) else { return false };
        let mut fd = match rustix::fs::openat(
            directory,
            ".",
            OFlags::PATH | OFlags::DIRECTORY,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(_) => return false,
        };
        for _ in 0..4096 {
            if self.read_only.contains(&current) {
                return false;
            }
            if self.allowed.contains(&current) {
                return true;
            }
            let Ok(parent) =
                rustix::fs::openat(&fd, "..", OFlags::PATH | OFlags::DIRECTORY, Mode::empty())
            else {
                return false;
            };
            let Some(up) = identity(&parent) else { return false };
            if up == current {
                return false;
            }
            (fd, current) = (parent, up);
        }
        false
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)
}

fn socket_domain(socket: &OwnedFd) -> Option<i32> {
    let mut domain: libc::c_int = 0;
    let mut size = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes an int into `domain`, of the size given.
    let done = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_DOMAIN,
            (&mut domain as *mut libc::c_int).cast(),
            &mut size,
        )
    };
    (done == 0).then_some(domain)
}

/// `connect` of `socket` to the address `bytes` (family and path, as the command gave it).
fn connect_raw(socket: &OwnedFd, bytes: &[u8]) -> Result<(), i32> {
    // SAFETY: `bytes` is a sockaddr_un of its length (at most the struct's size, checked).
    let done = unsafe {
        libc::connect(socket.as_raw_fd(), bytes.as_ptr().cast(), bytes.len() as libc::socklen_t)
    };
    if done == 0 { Ok(()) } else { Err(errno()) }
}

/// `connect` of `socket` to the socket file at `path`.
fn connect_path(socket: &OwnedFd, path: &[u8]) -> Result<(), i32> {
    let mut bytes = (libc::AF_UNIX as u16).to_ne_bytes().to_vec();
    bytes.extend_from_slice(path);
    bytes.push(0);
    connect_raw(socket, &bytes)
}
