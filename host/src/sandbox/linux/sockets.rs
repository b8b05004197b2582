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
//! is connected in the command's own network namespace and Landlock domain (the gate shares
//! both: the shim under Landlock, the gate inside bwrap under bubblewrap), so only names the
//! sandbox itself made are reached.

use super::Policy;
use super::trapped::Target;
use std::ffi::OsStr;
use std::os::fd::{AsRawFd as _, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;

/// A file's identity: device and inode.
type Identity = (u64, u64);

/// Where a command may connect.
#[derive(Debug)]
pub(crate) struct Sockets {
    /// The directories a socket may be beneath ([`Policy::sockets`]) and the read-only paths,
    /// by identity (the same under bubblewrap, whose binds keep device and inode).
    allowed: Vec<Identity>,
    read_only: Vec<Identity>,
}

impl Sockets {
    pub(crate) fn new(policy: &Policy) -> Self {
        let identities = |paths: &[std::path::PathBuf]| -> Vec<Identity> {
            paths
                .iter()
                .filter_map(|path| {
                    use std::os::unix::fs::MetadataExt as _;
                    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
                })
                .collect()
        };
        Self { allowed: identities(&policy.sockets), read_only: identities(&policy.read_only) }
    }

    /// Does the command's `connect(fd, address, length)` or says why not (an errno).
    pub(crate) fn connect(&self, target: &Target, args: &[u64; 6]) -> Result<(), i32> {
        let [fd, address, length, ..] = *args;
        let length = usize::try_from(length).map_err(|_| libc::EINVAL)?;
        if length < 2 || length > std::mem::size_of::<libc::sockaddr_un>() {
            return Err(libc::EINVAL);
        }
        let bytes = target.read(address, length)?;
        let socket = target.descriptor(fd as i32)?;
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
            // An abstract name: the gate shares the command's network namespace (bwrap's
            // own) and Landlock domain, whose scope decides, as it would for the command.
            return connect_raw(&socket, &bytes);
        }
        let path = path.split(|&b| b == 0).next().unwrap_or_default();
        let target = self.find_socket(target.pid, OsStr::from_bytes(path))?;
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

use super::trapped::errno;

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
