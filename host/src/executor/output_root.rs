//! Where command output files (spill files, background task output) live: one private
//! directory per agent process, `$TMPDIR/hotsh-<uid>-<pid>-<random>/<session id>/`; and each
//! session's private temp dir (its commands' `$TMPDIR`), beside it:
//! `$TMPDIR/hotsh-<uid>-<pid>-<random>-t<session>/`.
//!
//! The directories are made with `mkdir` (mode 0700) under a name no other process has used,
//! so another user sharing the temp directory can neither read what is in them nor plant
//! anything in their place; files are 0600 (`capture.rs`). A starting agent removes the
//! directories of this user's agents that are no longer running.
//!
//! A confined command may write the temp directory these lie in, so the host trusts no path
//! of them after a command ran (issue "seams"): the output root is read-only to every confined
//! command (it is among what hotsh trusts, `sandbox/protect.rs`), every file in it is made
//! beneath it without following a link (`nofollow.rs`), and a session's temp dir is a writable
//! root pinned where it is (a mount point, which cannot be renamed or removed) whose device
//! and inode are checked against the ones made before each command uses it.

use crate::sync::lock;
use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};

#[derive(Debug)]
pub(crate) struct OutputRoot {
    /// The temp dir these lie in, canonical, held open; `None` when unavailable.
    parent: Option<OwnedFd>,
    /// `hotsh-<uid>-<pid>-<random>`.
    name: String,
    path: PathBuf,
    /// The temp dir made for each session.
    temps: std::sync::Mutex<HashMap<String, Temp>>,
}

/// A session's temp dir as made: its name beside the output root, its device and inode.
#[derive(Debug, Clone)]
struct Temp {
    name: PathBuf,
    identity: (u64, u64),
    /// How many were made for the session before (each replaced by something else).
    generation: u32,
}

impl OutputRoot {
    /// Creates this process's directory in `temp_dir` (after sweeping the directories of dead
    /// agents of this user).
    pub(crate) fn create(temp_dir: &Path) -> std::io::Result<Self> {
        let temp_dir = std::fs::canonicalize(temp_dir)?;
        sweep_dead(&temp_dir);
        let parent = crate::nofollow::open_directory(&temp_dir, false)?;
        let prefix = prefix_of(std::process::id());
        loop {
            let random = uuid::Uuid::new_v4().simple().to_string();
            let name = format!("{prefix}{}", &random[..12]);
            let path = temp_dir.join(&name);
            match std::fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => {
                    let temps = std::sync::Mutex::default();
                    return Ok(Self { parent: Some(parent), name, path, temps });
                }
                Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(error) => return Err(error),
            }
        }
    }

    /// A root where nothing can be created: output files are then reported unavailable.
    pub(crate) fn unavailable() -> Self {
        Self {
            parent: None,
            name: String::new(),
            path: PathBuf::from("/dev/null/hotsh-output-unavailable"),
            temps: std::sync::Mutex::default(),
        }
    }

    /// The directory itself: what hotsh trusts (read-only to every confined command).
    pub(crate) fn path(&self) -> Option<&Path> {
        self.parent.as_ref().map(|_| self.path.as_path())
    }

    /// The directory of one session's output files (made when the first file is).
    pub(crate) fn session_dir(&self, session: &str) -> PathBuf {
        self.path.join(session)
    }

    /// A session's private temp dir (its commands' `$TMPDIR`), made (0700) when missing and
    /// checked to be the directory made before otherwise. Its name is short, so that a socket
    /// path under it stays within the 108 bytes a Unix socket address holds.
    ///
    /// When something else stands there now (a link, a file, another directory: only a
    /// command outside the sandbox can have put it there), it is left alone and the error
    /// says so. For a command, a new directory under a new name also becomes the session's:
    /// the command that met it does not run, the next one uses the new directory. Ahead of
    /// any command (preparing a sandbox) nothing is made: the next command meets it.
    pub(crate) fn session_temp(&self, session: &str, by: TempUse) -> std::io::Result<PathBuf> {
        let parent = self.parent.as_ref().ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "hotsh has no private directory in the temp dir",
            )
        })?;
        let mut temps = lock(&self.temps);
        let made = temps.get(session).cloned();
        let name = made.as_ref().map_or_else(|| self.temp_name(session, 0), |m| m.name.clone());
        let path = self.path.with_file_name(&name);
        match (crate::nofollow::identity(parent, &name), &made) {
            (Ok((device, inode, true)), Some(made)) if (device, inode) == made.identity => {
                return Ok(path);
            }
            (Err(error), _) if error.kind() != std::io::ErrorKind::NotFound => return Err(error),
            (Err(_), _) => {
                let generation = made.map_or(0, |m| m.generation);
                let made = self.make_temp(parent, session, generation)?;
                let path = self.path.with_file_name(&made.name);
                temps.insert(session.to_owned(), made);
                return Ok(path);
            }
            (Ok(_), _) => {}
        }
        if by == TempUse::Ahead {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!("{} was replaced", path.display()),
            ));
        }
        let generation = made.map_or(0, |m| m.generation) + 1;
        let fresh = self.make_temp(parent, session, generation)?;
        let fresh_path = self.path.with_file_name(&fresh.name);
        temps.insert(session.to_owned(), fresh);
        tracing::warn!(session, replaced = %path.display(), new = %fresh_path.display(), "refused the session's temp dir: something replaced it");
        Err(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            format!(
                "{} is not the private temp dir hotsh made for this session (something replaced it), so hotsh did not use it; the session's commands now get {}: run the command again",
                path.display(),
                fresh_path.display()
            ),
        ))
    }

    fn make_temp(&self, parent: &OwnedFd, session: &str, generation: u32) -> std::io::Result<Temp> {
        let name = self.temp_name(session, generation);
        let made = crate::nofollow::private_directory(parent, &name)?;
        let stat = rustix::fs::fstat(&made)?;
        Ok(Temp { name, identity: (stat.st_dev as u64, stat.st_ino), generation })
    }

    /// `hotsh-<uid>-<pid>-<random>-t<session, 12 letters and digits at most>[-<generation>]`.
    fn temp_name(&self, session: &str, generation: u32) -> PathBuf {
        let short: String = session.chars().filter(char::is_ascii_alphanumeric).take(12).collect();
        match generation {
            0 => PathBuf::from(format!("{}-t{short}", self.name)),
            n => PathBuf::from(format!("{}-t{short}-{n}", self.name)),
        }
    }

    /// Removes one session's output files and its temp dir (a deleted session).
    pub(crate) fn remove_session(&self, session: &str) {
        if self.parent.is_none() {
            return;
        }
        let temp = lock(&self.temps).remove(session).map(|t| self.path.with_file_name(t.name));
        for dir in std::iter::once(self.session_dir(session)).chain(temp) {
            // `remove_dir_all` removes a link, never what it points to.
            if let Err(error) = std::fs::remove_dir_all(&dir)
                && error.kind() != std::io::ErrorKind::NotFound
            {
                tracing::debug!(dir = %dir.display(), %error, "cannot remove a session's files");
            }
        }
    }

    /// Removes this process's output files and sessions' temp dirs.
    pub(crate) fn remove(&self) {
        if self.parent.is_none() {
            return;
        }
        let temps: Vec<PathBuf> = lock(&self.temps).values().map(|t| t.name.clone()).collect();
        let dirs = temps.iter().map(|name| self.path.with_file_name(name));
        for dir in std::iter::once(self.path.clone()).chain(dirs) {
            // `remove_dir_all` removes a link, never what it points to.
            if let Err(error) = std::fs::remove_dir_all(&dir)
                && error.kind() != std::io::ErrorKind::NotFound
            {
                tracing::debug!(dir = %dir.display(), %error, "cannot remove output directory");
            }
        }
    }
}

/// Who asks for a session's temp dir.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TempUse {
    /// A command about to run: a replaced directory is refused and a new one made.
    Command,
    /// Preparing ahead of any command: a replaced directory is only reported.
    Ahead,
}

/// One session's temp dir as its calls reach it: made or checked on each use.
#[derive(Debug, Clone)]
pub(crate) struct SessionTemp {
    root: std::sync::Arc<OutputRoot>,
    session: String,
}

impl SessionTemp {
    pub(crate) fn new(root: &std::sync::Arc<OutputRoot>, session: &str) -> Self {
        Self { root: std::sync::Arc::clone(root), session: session.to_owned() }
    }

    /// The directory, made or checked now ([`OutputRoot::session_temp`]); `Ok(None)` when
    /// none can be made (commands then get the host's `$TMPDIR`), an error when something
    /// replaced it (the command is refused: the text says why).
    pub(crate) fn path(&self, by: TempUse) -> Result<Option<PathBuf>, String> {
        match self.root.session_temp(&self.session, by) {
            Ok(path) => Ok(Some(path)),
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
                Err(error.to_string())
            }
            Err(error) => {
                tracing::debug!(session = self.session, %error, "no private temp dir for commands");
                Ok(None)
            }
        }
    }
}

/// `hotsh-<uid>-<pid>-`.
fn prefix_of(pid: u32) -> String {
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    format!("hotsh-{uid}-{pid}-")
}

/// Removes the output and temp directories of this user's agents that are no longer running.
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
        if pid == std::process::id() || super::process::exists(pid) {
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn a_sessions_temp_dir_is_made_once_and_refused_once_replaced() {
        let temp = tempfile::tempdir().unwrap();
        let root = OutputRoot::create(temp.path()).unwrap();
        let made = root.session_temp("s-1", TempUse::Command).unwrap();
        assert!(made.is_dir());
        assert_eq!(made.parent(), root.path().and_then(Path::parent));
        assert_eq!(root.session_temp("s-1", TempUse::Command).unwrap(), made, "the same, checked");
        // Replaced by a link to another directory: refused, nothing followed.
        let elsewhere = tempfile::tempdir().unwrap();
        std::fs::rename(&made, temp.path().join("moved")).unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), &made).unwrap();
        // Looked at ahead of a command: reported, nothing made, so the command meets it.
        assert!(root.session_temp("s-1", TempUse::Ahead).is_err());
        let error = root.session_temp("s-1", TempUse::Command).unwrap_err();
        assert!(error.to_string().contains("something replaced it"), "{error}");
        // The link is left alone; a new directory is the session's from now on.
        assert!(made.is_symlink());
        let fresh = root.session_temp("s-1", TempUse::Command).unwrap();
        assert_ne!(fresh, made);
        assert!(fresh.is_dir() && !fresh.is_symlink());
        assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);
        // Replaced by another directory (the first moved aside): refused too.
        std::fs::rename(&fresh, temp.path().join("moved-too")).unwrap();
        std::fs::create_dir(&fresh).unwrap();
        assert!(root.session_temp("s-1", TempUse::Command).is_err());
        let third = root.session_temp("s-1", TempUse::Command).unwrap();
        // Removed: made again under its name.
        std::fs::remove_dir(&third).unwrap();
        assert_eq!(root.session_temp("s-1", TempUse::Command).unwrap(), third);
        root.remove();
        assert!(!third.exists() && root.path().is_some_and(|p| !p.exists()));
    }
}
