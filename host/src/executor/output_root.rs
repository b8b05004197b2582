//! Where command output files (spill files, background task output) live: one private
//! directory per agent process, `$TMPDIR/hotsh-<uid>-<pid>-<random>/<session id>/`.
//!
//! The directory is made with `mkdir` (mode 0700) under a name no other process has used, so
//! another user sharing the temp directory can neither read what is in it nor plant anything
//! in its place; files in it are 0600 (`capture.rs`). A starting agent removes the
//! directories of this user's agents that are no longer running.

use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};

#[derive(Debug)]
pub(crate) struct OutputRoot {
    path: PathBuf,
}

impl OutputRoot {
    /// Creates this process's directory in `temp_dir` (after sweeping the directories of dead
    /// agents of this user).
    pub(crate) fn create(temp_dir: &Path) -> std::io::Result<Self> {
        sweep_dead(temp_dir);
        let prefix = prefix_of(std::process::id());
        loop {
            let random = uuid::Uuid::new_v4().simple().to_string();
            let path = temp_dir.join(format!("{prefix}{}", &random[..12]));
            match std::fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => return Ok(Self { path }),
                Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(error) => return Err(error),
            }
        }
    }

    /// A root where nothing can be created: output files are then reported unavailable.
    pub(crate) fn unavailable() -> Self {
        Self { path: PathBuf::from("/dev/null/hotsh-output-unavailable") }
    }

    /// The directory of one session's output files (made when the first file is).
    pub(crate) fn session_dir(&self, session: &str) -> PathBuf {
        self.path.join(session)
    }

    /// A session's private temp dir (its commands' `$TMPDIR`): short, beside the session's
    /// output directory, so that a socket path under it stays within the 108 bytes a Unix
    /// socket address holds.
    pub(crate) fn session_temp_dir(&self, session: &str) -> PathBuf {
        let short: String = session.chars().filter(char::is_ascii_alphanumeric).take(12).collect();
        self.path.join(format!("t{short}"))
    }

    /// Removes this process's output files.
    pub(crate) fn remove(&self) {
        if let Err(error) = std::fs::remove_dir_all(&self.path)
            && error.kind() != std::io::ErrorKind::NotFound
        {
            tracing::debug!(dir = %self.path.display(), %error, "cannot remove output directory");
        }
    }
}

/// `hotsh-<uid>-<pid>-`.
fn prefix_of(pid: u32) -> String {
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    format!("hotsh-{uid}-{pid}-")
}

/// Removes the output directories of this user's agents that are no longer running.
fn sweep_dead(temp_dir: &Path) {
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    let ours = format!("hotsh-{uid}-");
    let Ok(entries) = std::fs::read_dir(temp_dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(&ours)) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        // Only a real directory of this user's (never through a link someone planted).
        let owned = std::fs::symlink_metadata(entry.path())
            .is_ok_and(|meta| meta.is_dir() && meta.uid() == uid);
        if owned && let Err(error) = std::fs::remove_dir_all(entry.path()) {
            tracing::debug!(dir = %entry.path().display(), %error, "cannot remove a dead agent's output");
        }
    }
}
