//! Making names in directories, for a confined command (`notify.rs` says why its shim makes
//! these calls for it): every call that makes a directory entry (`mkdir`, `mknod`, `symlink`,
//! `link`, `rename`, an `open` that may create) is refused when the new name is `.git`, and
//! made as the command would have made it otherwise. With every existing `.git` read-only,
//! no command can then leave a repository (hooks, `core.fsmonitor`, a `gitdir:` file) that
//! the user's `git`, or Zed's, would later run outside the sandbox.
//!
//! Each path is copied out of the command once; its directory is reached from the command's
//! working directory or directory descriptor, never through a "magic" link of `/proc` (those
//! would name the shim's own descriptors): the standard names of the command's own
//! descriptors (`/dev/stdout`, `/dev/fd/N`, `/proc/self/fd/N`) are taken to mean them.

use super::trapped::{Answer, Target, errno};
use rustix::fs::{AtFlags, Mode, OFlags, ResolveFlags};
use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd as _, AsRawFd as _, BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt as _, OsStringExt as _};

/// The name no command may make.
const GIT: &[u8] = b".git";

/// Answers one of the calls that make names (those the gate in `notify.rs` is sent), or an
/// `open` that creates.
pub(crate) fn answer(target: &Target, nr: i64, args: &[u64; 6]) -> Answer {
    match call(target, nr, args) {
        Ok(answer) => answer,
        Err(errno) => Answer::Error(errno),
    }
}

/// `AT_FDCWD` as the calls without a directory argument mean it.
const CWD: u64 = libc::AT_FDCWD as i64 as u64;

fn call(target: &Target, nr: i64, args: &[u64; 6]) -> Result<Answer, i32> {
    let path = |at: usize| target.read_path(args[at]);
    #[cfg(target_arch = "x86_64")]
    match nr {
        libc::SYS_open => return open(target, CWD, path(0)?, args[1], args[2], 0),
        libc::SYS_creat => {
            let flags = (libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC) as u64;
            return open(target, CWD, path(0)?, flags, args[1], 0);
        }
        libc::SYS_mkdir => return mkdir(target, CWD, path(0)?, args[1]),
        libc::SYS_mknod => return mknod(target, CWD, path(0)?, args[1], args[2]),
        libc::SYS_symlink => return symlink(target, path(0)?, CWD, path(1)?),
        libc::SYS_link => return link(target, [CWD, CWD], [path(0)?, path(1)?], 0),
        libc::SYS_rename => return rename(target, [CWD, CWD], [path(0)?, path(1)?], 0),
        _ => {}
    }
    match nr {
        libc::SYS_openat => open(target, args[0], path(1)?, args[2], args[3], 0),
        libc::SYS_openat2 => {
            let size = usize::try_from(args[3]).map_err(|_| libc::EINVAL)?;
            if size < std::mem::size_of::<libc::open_how>() {
                return Err(libc::EINVAL);
            }
            let how = target.read(args[2], std::mem::size_of::<libc::open_how>())?;
            let word = |at: usize| {
                u64::from_ne_bytes(how[at * 8..at * 8 + 8].try_into().expect("eight bytes"))
            };
            open(target, args[0], path(1)?, word(0), word(1), word(2))
        }
        libc::SYS_mkdirat => mkdir(target, args[0], path(1)?, args[2]),
        libc::SYS_mknodat => mknod(target, args[0], path(1)?, args[2], args[3]),
        libc::SYS_symlinkat => symlink(target, path(0)?, args[1], path(2)?),
        libc::SYS_linkat => link(target, [args[0], args[2]], [path(1)?, path(3)?], args[4]),
        libc::SYS_renameat => rename(target, [args[0], args[2]], [path(1)?, path(3)?], 0),
        libc::SYS_renameat2 => rename(target, [args[0], args[2]], [path(1)?, path(3)?], args[4]),
        _ => Err(libc::ENOSYS),
    }
}

/// Whether `path` makes (or names last) an entry called `.git`.
fn names_git(path: &[u8]) -> bool {
    let trimmed = path.iter().rposition(|&b| b != b'/').map_or(&path[..0], |end| &path[..=end]);
    let last = trimmed.iter().rposition(|&b| b == b'/').map_or(trimmed, |at| &trimmed[at + 1..]);
    last == GIT
}

fn refuse_git(path: &[u8]) -> Result<(), i32> {
    if names_git(path) { Err(libc::EPERM) } else { Ok(()) }
}

/// Where a path starts for the command: a directory descriptor of ours and the rest of the
/// path, relative to it (absolute paths start at the root, which the shim shares).
struct Start {
    directory: OwnedFd,
    rest: OsString,
}

/// The standard names of the command's own descriptors: `/dev/stdin`, `/dev/stdout`,
/// `/dev/stderr`, `/dev/fd/N`, `/proc/self/fd/N`, `/proc/thread-self/fd/N`; the descriptor
/// and what follows it.
fn own_descriptor(path: &[u8]) -> Option<(i32, &[u8])> {
    for (name, fd) in [(&b"/dev/stdin"[..], 0), (b"/dev/stdout", 1), (b"/dev/stderr", 2)] {
        if path == name {
            return Some((fd, b""));
        }
    }
    let rest = [&b"/dev/fd/"[..], b"/proc/self/fd/", b"/proc/thread-self/fd/"]
        .iter()
        .find_map(|prefix| path.strip_prefix(*prefix))?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    let fd = std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()?;
    let after = &rest[digits..];
    (after.is_empty() || after.starts_with(b"/"))
        .then_some((fd, after.strip_prefix(b"/").unwrap_or(after)))
}

fn start(target: &Target, dirfd: u64, path: &[u8]) -> Result<Start, i32> {
    if let Some((fd, rest)) = own_descriptor(path) {
        let directory = target.descriptor(fd)?;
        return Ok(Start { directory, rest: OsString::from_vec(rest.to_vec()) });
    }
    if path.starts_with(b"/proc/self/") || path.starts_with(b"/proc/thread-self/") {
        // Anything else of `/proc/self` would be the shim's.
        return Err(libc::EACCES);
    }
    let directory = if path.starts_with(b"/") {
        rustix::fs::open("/", OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
            .map_err(|e| e.raw_os_error())?
    } else {
        target.directory(dirfd)?
    };
    let rest = path.strip_prefix(b"/").unwrap_or(path);
    let rest = if rest.is_empty() && path.starts_with(b"/") { b"." } else { rest };
    Ok(Start { directory, rest: OsString::from_vec(rest.to_vec()) })
}

/// The directory holding the last component of `start.rest` and that component (trailing
/// slashes kept, as the kernel reads them), reached without magic links.
fn parent_and_name(start: Start) -> Result<(OwnedFd, OsString), i32> {
    let bytes = start.rest.as_bytes();
    let trimmed_end = bytes.iter().rposition(|&b| b != b'/').map_or(0, |end| end + 1);
    let split = bytes[..trimmed_end].iter().rposition(|&b| b == b'/');
    let (parent, name) = match split {
        Some(at) => (&bytes[..at], &bytes[at + 1..]),
        None => (&b"."[..], bytes),
    };
    let parent = if parent.is_empty() { &b"/"[..] } else { parent };
    let directory = rustix::fs::openat2(
        &start.directory,
        OsStr::from_bytes(parent),
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::NO_MAGICLINKS,
    )
    .map_err(|e| e.raw_os_error())?;
    Ok((directory, OsString::from_vec(name.to_vec())))
}

/// Runs `make` with the command's umask as this process's own.
fn with_umask<T>(target: &Target, make: impl FnOnce() -> T) -> Result<T, i32> {
    let mask = target.umask()?;
    // SAFETY: umask swaps this (single-threaded) process's mask; it is put back below.
    let before = unsafe { libc::umask(mask as libc::mode_t) };
    let made = make();
    // SAFETY: as above.
    unsafe { libc::umask(before) };
    Ok(made)
}

fn done(result: rustix::io::Result<()>) -> Result<Answer, i32> {
    result.map(|()| Answer::Value(0)).map_err(|e| e.raw_os_error())
}

fn mkdir(target: &Target, dirfd: u64, path: Vec<u8>, mode: u64) -> Result<Answer, i32> {
    refuse_git(&path)?;
    let (directory, name) = parent_and_name(start(target, dirfd, &path)?)?;
    let mode = Mode::from_raw_mode(mode as u32);
    done(with_umask(target, || rustix::fs::mkdirat(&directory, &name, mode))?)
}

fn mknod(target: &Target, dirfd: u64, path: Vec<u8>, mode: u64, dev: u64) -> Result<Answer, i32> {
    refuse_git(&path)?;
    let (directory, name) = parent_and_name(start(target, dirfd, &path)?)?;
    let c_name = c_string(&name)?;
    let made = with_umask(target, || {
        // SAFETY: mknodat with a directory we own and a NUL-terminated name.
        unsafe {
            libc::mknodat(
                directory.as_raw_fd(),
                c_name.as_ptr(),
                mode as libc::mode_t,
                dev as libc::dev_t,
            )
        }
    })?;
    if made == 0 { Ok(Answer::Value(0)) } else { Err(errno()) }
}

fn symlink(target: &Target, to: Vec<u8>, dirfd: u64, path: Vec<u8>) -> Result<Answer, i32> {
    refuse_git(&path)?;
    let (directory, name) = parent_and_name(start(target, dirfd, &path)?)?;
    done(rustix::fs::symlinkat(OsStr::from_bytes(&to), &directory, &name))
}

fn link(target: &Target, dirfds: [u64; 2], paths: [Vec<u8>; 2], flags: u64) -> Result<Answer, i32> {
    let [old, new] = paths;
    refuse_git(&new)?;
    let (new_directory, new_name) = parent_and_name(start(target, dirfds[1], &new)?)?;
    let flags = AtFlags::from_bits(flags as u32).ok_or(libc::EINVAL)?;
    if old.is_empty() && flags.contains(AtFlags::EMPTY_PATH) {
        let file = target.directory(dirfds[0])?;
        return done(rustix::fs::linkat(&file, "", &new_directory, &new_name, flags));
    }
    let (old_directory, old_name) = parent_and_name(start(target, dirfds[0], &old)?)?;
    done(rustix::fs::linkat(&old_directory, &old_name, &new_directory, &new_name, flags))
}

fn rename(
    target: &Target,
    dirfds: [u64; 2],
    paths: [Vec<u8>; 2],
    flags: u64,
) -> Result<Answer, i32> {
    let [old, new] = paths;
    refuse_git(&new)?;
    let exchange = flags & u64::from(libc::RENAME_EXCHANGE) != 0;
    if exchange {
        // Both names are new ones then.
        refuse_git(&old)?;
    }
    let (old_directory, old_name) = parent_and_name(start(target, dirfds[0], &old)?)?;
    let (new_directory, new_name) = parent_and_name(start(target, dirfds[1], &new)?)?;
    let flags = rustix::fs::RenameFlags::from_bits(flags as u32).ok_or(libc::EINVAL)?;
    done(rustix::fs::renameat_with(&old_directory, &old_name, &new_directory, &new_name, flags))
}

/// An `open` (or `creat`, `openat2`) that may create: refused for `.git`, else opened here with
/// the command's flags (blocking ones without blocking the shim) and handed to the command.
fn open(
    target: &Target,
    dirfd: u64,
    path: Vec<u8>,
    flags: u64,
    mode: u64,
    resolve: u64,
) -> Result<Answer, i32> {
    let flags = flags as i32;
    if flags & libc::O_CREAT != 0 {
        refuse_git(&path)?;
    }
    let close_on_exec = flags & libc::O_CLOEXEC != 0;
    let start = start(target, dirfd, &path)?;
    let rest = if start.rest.is_empty() { OsString::from(".") } else { start.rest };
    let own = own_descriptor(&path).is_some_and(|(_, rest)| rest.is_empty());
    let resolve = ResolveFlags::from_bits(resolve).ok_or(libc::EINVAL)?;
    // The command's own descriptor is opened again through our copy of it (what the kernel
    // does for it with /proc/self/fd/N); any other magic link would be the shim's.
    let resolve = if own { resolve } else { resolve | ResolveFlags::NO_MAGICLINKS };
    let reopened;
    let (base, name): (BorrowedFd<'_>, &OsStr) = if own {
        reopened = format!("/proc/self/fd/{}", start.directory.as_raw_fd());
        (rustix::fs::CWD, OsStr::new(&reopened))
    } else {
        (start.directory.as_fd(), rest.as_os_str())
    };
    // Never blocking here (a FIFO with no reader yet would stop the shim, and every other
    // call of the command with it): a FIFO's blocking open goes to a thread of its own.
    let wanted = OFlags::from_bits_retain((flags & !libc::O_CLOEXEC) as u32) | OFlags::CLOEXEC;
    let nonblocking = wanted | OFlags::NONBLOCK;
    let mode = Mode::from_raw_mode(mode as u32);
    let opened =
        with_umask(target, || rustix::fs::openat2(base, name, nonblocking, mode, resolve))?;
    let file = match opened {
        Ok(file) => file,
        Err(rustix::io::Errno::NXIO) if flags & libc::O_NONBLOCK == 0 => {
            // A FIFO with no reader yet: it exists, so nothing is created and the umask does
            // not matter; the blocking open waits on a thread.
            let (base, name) = (own_base(&start.directory, own)?, name.to_owned());
            return Ok(Answer::Later(Box::new(move || {
                match rustix::fs::openat2(&base, &name, wanted, mode, resolve) {
                    Ok(file) => Answer::Descriptor { file, close_on_exec },
                    Err(error) => Answer::Error(error.raw_os_error()),
                }
            })));
        }
        Err(error) => return Err(error.raw_os_error()),
    };
    if flags & libc::O_NONBLOCK == 0 {
        let status = rustix::fs::fcntl_getfl(&file).map_err(|e| e.raw_os_error())?;
        rustix::fs::fcntl_setfl(&file, status - OFlags::NONBLOCK).map_err(|e| e.raw_os_error())?;
    }
    Ok(Answer::Descriptor { file, close_on_exec })
}

/// A descriptor of its own for the directory an open starts at (the working directory when
/// the command's own descriptor is reopened by its `/proc/self/fd` name).
fn own_base(directory: &OwnedFd, own: bool) -> Result<OwnedFd, i32> {
    let base = if own { rustix::fs::CWD } else { directory.as_fd() };
    rustix::fs::openat(base, ".", OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| e.raw_os_error())
}

fn c_string(name: &OsStr) -> Result<std::ffi::CString, i32> {
    std::ffi::CString::new(name.as_bytes()).map_err(|_| libc::EINVAL)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_names_git_by_its_last_component_only() {
        for path in [&b".git"[..], b"a/.git", b"a/.git/", b"/x/.git//", b"./.git"] {
            assert!(names_git(path), "{}", String::from_utf8_lossy(path));
        }
        for path in [&b".gitignore"[..], b".git/hooks", b"a/.git/x", b"git", b".", b"/", b""] {
            assert!(!names_git(path), "{}", String::from_utf8_lossy(path));
        }
    }

    #[test]
    fn the_standard_names_of_a_commands_descriptors_are_its_own() {
        assert_eq!(own_descriptor(b"/dev/stdout"), Some((1, &b""[..])));
        assert_eq!(own_descriptor(b"/dev/fd/3"), Some((3, &b""[..])));
        assert_eq!(own_descriptor(b"/proc/self/fd/12/sub/x"), Some((12, &b"sub/x"[..])));
        assert_eq!(own_descriptor(b"/dev/fd/3x"), None);
        assert_eq!(own_descriptor(b"/dev/stdoutx"), None);
        assert_eq!(own_descriptor(b"/tmp/x"), None);
    }
}
