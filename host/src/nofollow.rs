//! Opening and making the host's own files and directories without ever following a
//! symbolic link on any component of the path (issue "seams"): a confined command may be able
//! to write somewhere on the way to a file the host makes, and a link it put there must not
//! send the host's write elsewhere.
//!
//! Paths are absolute and resolved once by the caller (the directories hotsh made, or a path
//! resolved before a check). A directory is opened with `openat2(RESOLVE_NO_SYMLINKS |
//! RESOLVE_NO_MAGICLINKS)` where the kernel has it (Linux 5.6), else component by component
//! with `O_NOFOLLOW`; either way a link now anywhere on the path is an error, not followed.

use rustix::fs::{AtFlags, Mode, OFlags};
use std::os::fd::OwnedFd;
use std::path::Path;

/// A directory opened only to be a starting point (`O_PATH`, which Linux alone has; a
/// directory opened for reading elsewhere).
#[cfg(target_os = "linux")]
const DIRECTORY: OFlags =
    OFlags::PATH.union(OFlags::DIRECTORY).union(OFlags::NOFOLLOW).union(OFlags::CLOEXEC);
#[cfg(not(target_os = "linux"))]
const DIRECTORY: OFlags =
    OFlags::RDONLY.union(OFlags::DIRECTORY).union(OFlags::NOFOLLOW).union(OFlags::CLOEXEC);

/// Opens the directory `path` (absolute, without links) from `/`, never following a link:
/// one there now is an error. With `create`, missing directories are made on the way (mode
/// 0777 less the umask).
pub(crate) fn open_directory(path: &Path, create: bool) -> std::io::Result<OwnedFd> {
    #[cfg(target_os = "linux")]
    if !create {
        use rustix::fs::ResolveFlags;
        let resolve = ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
        match rustix::fs::openat2(rustix::fs::CWD, path, DIRECTORY, Mode::empty(), resolve) {
            // A kernel before 5.6, or a filter that refuses the call: walk instead.
            Err(rustix::io::Errno::NOSYS | rustix::io::Errno::PERM) => {}
            Err(rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR) => {
                return Err(changed(path));
            }
            opened => return opened.map_err(Into::into),
        }
    }
    // Elsewhere (and on an older kernel), component by component.
    walk(path, create, Mode::from_raw_mode(0o777))
}

/// Why [`open_regular`] did not open a file.
#[derive(Debug)]
pub(crate) enum NotRegular {
    /// The path names a symbolic link (not followed).
    Link,
    /// The path names something other than a file: `"a FIFO"`, `"a directory"`, `"a
    /// socket"` or `"a device"`.
    Kind(&'static str),
    /// It could not be opened (missing, no permission…).
    Io(std::io::Error),
}

/// Opens the regular file `path` for reading (or for appending): never through a link as
/// its last component (`O_NOFOLLOW`), never waiting on a FIFO's writer (`O_NONBLOCK`), and
/// refusing whatever is not a regular file. For files a command could have replaced: a
/// session's log, the stored key, an agent definition.
pub(crate) fn open_regular(path: &Path, append: bool) -> Result<std::fs::File, NotRegular> {
    use std::os::unix::fs::{FileTypeExt as _, OpenOptionsExt as _};
    let file = std::fs::OpenOptions::new()
        .read(!append)
        .append(append)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|error| match error.raw_os_error() {
            Some(libc::ELOOP) => NotRegular::Link,
            _ => NotRegular::Io(error),
        })?;
    let kind = file.metadata().map_err(NotRegular::Io)?.file_type();
    Err(NotRegular::Kind(if kind.is_file() {
        return Ok(file);
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_dir() {
        "a directory"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "a device"
    }))
}

/// `path` with every link resolved, as `std::fs::canonicalize` gives it, for paths resolved
/// on every confined command (the sandbox's roots and what it protects). On Linux the kernel
/// resolves the whole path in one `open(O_PATH)` and names what it opened
/// (`/proc/self/fd/N`): three calls, where `realpath` reads each component's link (a dozen
/// `readlink` for a path under `$HOME`).
pub(crate) fn canonical(path: &Path) -> std::io::Result<std::path::PathBuf> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd as _;
        let opened = rustix::fs::open(path, OFlags::PATH | OFlags::CLOEXEC, Mode::empty())?;
        let named = std::fs::read_link(format!("/proc/self/fd/{}", opened.as_raw_fd()))?;
        // A name the kernel can no longer give (deleted, or outside this root) is not one.
        if named.is_absolute() && !named.as_os_str().as_encoded_bytes().ends_with(b" (deleted)") {
            return Ok(named);
        }
    }
    std::fs::canonicalize(path)
}

/// Opens `path` component by component from `/` with `O_NOFOLLOW`, making missing directories
/// with `mode` when `create`.
fn walk(path: &Path, create: bool, mode: Mode) -> std::io::Result<OwnedFd> {
    if !path.is_absolute() {
        return Err(std::io::Error::other(format!("{} is not absolute", path.display())));
    }
    let mut directory = rustix::fs::open("/", DIRECTORY, Mode::empty())?;
    for component in path.components() {
        let name = match component {
            std::path::Component::RootDir => continue,
            std::path::Component::Normal(name) => name,
            other => {
                return Err(std::io::Error::other(format!("the path holds {other:?}")));
            }
        };
        let next = match rustix::fs::openat(&directory, name, DIRECTORY, Mode::empty()) {
            Err(rustix::io::Errno::NOENT) if create => {
                match rustix::fs::mkdirat(&directory, name, mode) {
                    Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                    Err(error) => return Err(error.into()),
                }
                rustix::fs::openat(&directory, name, DIRECTORY, Mode::empty())
            }
            opened => opened,
        };
        directory = next.map_err(|error| match error {
            rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR => changed(path),
            error => error.into(),
        })?;
    }
    Ok(directory)
}

fn changed(path: &Path) -> std::io::Error {
    std::io::Error::other(format!(
        "{} is not the directory it was (a link or a file stands where a directory was); hotsh does not follow it",
        path.display()
    ))
}

/// Makes the directory `name` (mode 0700) in `parent` if it is not there, and opens it; an
/// existing one must be a directory of this user's, not a link.
pub(crate) fn private_directory(parent: &OwnedFd, name: &Path) -> std::io::Result<OwnedFd> {
    match rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(0o700)) {
        Ok(()) | Err(rustix::io::Errno::EXIST) => {}
        Err(error) => return Err(error.into()),
    }
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let directory =
        rustix::fs::openat(parent, name, flags, Mode::empty()).map_err(|error| match error {
            rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR => std::io::Error::other(format!(
                "{} is a link or a file, not the private directory hotsh makes there",
                name.display()
            )),
            error => error.into(),
        })?;
    let stat = rustix::fs::fstat(&directory)?;
    // SAFETY: getuid cannot fail.
    if stat.st_uid != unsafe { libc::getuid() } {
        return Err(std::io::Error::other(format!(
            "{} belongs to another user; hotsh does not use it",
            name.display()
        )));
    }
    Ok(directory)
}

/// Creates the new file `path` (mode 0600), its directory made (0700) when missing; nothing on
/// the way to it is followed, and an existing name is an error.
pub(crate) fn create_private_file(path: &Path) -> std::io::Result<std::fs::File> {
    let (Some(directory), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(std::io::Error::other(format!("{} names no file", path.display())));
    };
    let (Some(grandparent), Some(directory_name)) = (directory.parent(), directory.file_name())
    else {
        return Err(std::io::Error::other(format!("{} has no directory", path.display())));
    };
    let grandparent = open_directory(grandparent, false)?;
    let directory = private_directory(&grandparent, Path::new(directory_name))?;
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let file = rustix::fs::openat(&directory, name, flags, Mode::from_raw_mode(0o600))?;
    Ok(std::fs::File::from(file))
}

/// The device and inode of `name` in `parent`, not following a link.
pub(crate) fn identity(parent: &OwnedFd, name: &Path) -> std::io::Result<(u64, u64, bool)> {
    let stat = rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW)?;
    let is_directory = rustix::fs::FileType::from_raw_mode(stat.st_mode).is_dir();
    Ok((stat.st_dev as u64, stat.st_ino, is_directory))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn only_a_regular_file_is_opened_never_through_a_link_nor_waiting_on_a_fifo() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("file"), "text").unwrap();
        std::os::unix::fs::symlink(root.join("file"), root.join("link")).unwrap();
        let fifo = std::ffi::CString::new(root.join("fifo").as_os_str().as_encoded_bytes());
        // SAFETY: a valid C string.
        assert_eq!(unsafe { libc::mkfifo(fifo.unwrap().as_ptr(), 0o600) }, 0);
        assert!(open_regular(&root.join("file"), false).is_ok());
        assert!(open_regular(&root.join("file"), true).is_ok());
        assert!(matches!(open_regular(&root.join("link"), false), Err(NotRegular::Link)));
        assert!(matches!(open_regular(&root.join("fifo"), false), Err(NotRegular::Kind("a FIFO"))));
        assert!(matches!(open_regular(root, false), Err(NotRegular::Kind("a directory"))));
        let missing = open_regular(&root.join("missing"), false);
        assert!(
            matches!(missing, Err(NotRegular::Io(e)) if e.kind() == std::io::ErrorKind::NotFound)
        );
    }

    #[test]
    fn a_canonical_path_is_the_one_realpath_gives() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(root.join("real/inner")).unwrap();
        std::os::unix::fs::symlink(root.join("real"), root.join("link")).unwrap();
        std::os::unix::fs::symlink("inner", root.join("real/relative")).unwrap();
        for path in ["link/inner", "link/relative", "real/../link/./inner", "real"] {
            let path = root.join(path);
            assert_eq!(canonical(&path).unwrap(), std::fs::canonicalize(&path).unwrap());
        }
        assert!(canonical(&root.join("link/missing")).is_err());
        std::os::unix::fs::symlink(root.join("gone"), root.join("dangling")).unwrap();
        assert!(canonical(&root.join("dangling")).is_err());
    }

    #[test]
    fn a_directory_is_opened_without_following_links_and_missing_ones_are_made() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir(root.join("real")).unwrap();
        std::os::unix::fs::symlink(root.join("real"), root.join("link")).unwrap();
        for create in [false, true] {
            let error = open_directory(&root.join("link/sub"), create).unwrap_err();
            assert!(error.to_string().contains("not the directory it was"), "{error}");
        }
        assert!(open_directory(&root.join("new/deeper"), false).is_err());
        open_directory(&root.join("new/deeper"), true).unwrap();
        assert!(root.join("new/deeper").is_dir());
    }

    #[test]
    fn a_private_file_is_made_beneath_real_directories_only() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let outside = tempfile::tempdir().unwrap();
        // A link as the file's directory, and as a directory above it: both refused.
        std::os::unix::fs::symlink(outside.path(), root.join("session")).unwrap();
        assert!(create_private_file(&root.join("session/bash-1.log")).is_err());
        std::fs::create_dir(root.join("real")).unwrap();
        std::os::unix::fs::symlink(root.join("real"), root.join("up")).unwrap();
        assert!(create_private_file(&root.join("up/session/bash-1.log")).is_err());
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
        assert_eq!(std::fs::read_dir(root.join("real")).unwrap().count(), 0);
        // A real path: made, 0600 in a 0700 directory; made once only.
        let path = root.join("real/session/bash-1.log");
        create_private_file(&path).unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!((mode(&path), mode(path.parent().unwrap())), (0o600, 0o700));
        assert!(create_private_file(&path).is_err());
    }
}
