//! The plugin builds this very hotsh checked before: a start with the same plugins loads them
//! without a throwaway process each.
//!
//! A check (`check.rs`) runs the build in a child process of the agent's own executable; its
//! verdict is a function of the build's bytes and of that executable. So once a build was
//! checked and then loaded here, `<data dir>/plugins-checked.json` keeps the pair (the
//! executable, the build's content hash), and a later start of the same executable loads the
//! same bytes straight away (still with its time limit). Anything else is checked as before:
//! another build (one byte changed), another hotsh (rebuilt, replaced, a copy elsewhere), a
//! build that was rejected (never kept), a record that cannot be read. The record lies in the
//! data directory, which no confined command may write (the sandbox's trusted paths), and it
//! can only spare a check of bytes that passed one: a plugin's code runs in the agent either
//! way, so it decides nothing about what a plugin may do.

use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The file's name in the data directory.
const FILE_NAME: &str = "plugins-checked.json";

/// The most pairs kept (the newest): enough for several hotsh builds side by side (an
/// installed one and a plugin author's) with a few plugins each.
const MAX_KEPT: usize = 64;

/// The record, as it is kept.
#[derive(Debug, Default, Serialize, Deserialize)]
struct File {
    /// Oldest first.
    builds: Vec<Checked>,
}

/// A build a check in a process of `hotsh` accepted, and this hotsh then loaded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Checked {
    /// The checking executable: [`executable_identity`].
    hotsh: String,
    /// The build's content hash (`loader::content_hash`), in hexadecimal.
    plugin: String,
}

/// The builds this hotsh checked before (read once, at the start of the initial scan) and
/// those it checked since.
#[derive(Debug)]
pub(crate) struct CheckedBuilds {
    /// `<data dir>/plugins-checked.json`; `None`: nothing is kept (no data directory, or no
    /// identity for this executable).
    path: Option<PathBuf>,
    /// This executable, as [`Checked::hotsh`] names it.
    hotsh: String,
    known: Mutex<Known>,
}

#[derive(Debug, Default)]
struct Known {
    /// Content hashes this hotsh checked (before or since).
    hashes: HashSet<u64>,
    /// Those to put into the record at the next write: loaded since it was last written
    /// (checked now, or taken out by [`CheckedBuilds::read`] and loaded).
    new: Vec<u64>,
    /// Those [`CheckedBuilds::read`] took out of the record that no load has tried since: the
    /// next write puts them back (a start without that plugin does not forget it).
    taken: Vec<u64>,
}

impl CheckedBuilds {
    /// The record of `data_dir` for the running executable.
    pub(crate) fn new(data_dir: Option<&Path>) -> Self {
        let hotsh = executable_identity();
        let path = data_dir.filter(|_| hotsh.is_some()).map(|dir| dir.join(FILE_NAME));
        Self { path, hotsh: hotsh.unwrap_or_default(), known: Mutex::default() }
    }

    /// Reads what this hotsh checked before, and takes it out of the record (written at once)
    /// until [`CheckedBuilds::write`] puts back what loaded or was not tried: so a build whose
    /// unchecked load takes the agent down (a constructor that crashes only now and then) is
    /// checked again at the next start instead of taking every later start down too. A record
    /// that cannot be read is warned about and counts as empty (the next write replaces it).
    pub(crate) fn read(&self) {
        let Some(path) = &self.path else { return };
        let Some(mut file) = read_file(path) else { return };
        let mut known = crate::sync::lock(&self.known);
        file.builds.retain(|checked| {
            let ours = checked.hotsh == self.hotsh;
            if let Some(hash) =
                ours.then(|| u64::from_str_radix(&checked.plugin, 16).ok()).flatten()
            {
                known.hashes.insert(hash);
                known.taken.push(hash);
            }
            !ours
        });
        if known.taken.is_empty() {
            return;
        }
        drop(known);
        write_file(path, &file);
    }

    /// Whether this hotsh checked the build of content hash `hash` before.
    pub(crate) fn knows(&self, hash: u64) -> bool {
        crate::sync::lock(&self.known).hashes.contains(&hash)
    }

    /// The hashes this hotsh checked, for a check begun on another thread.
    pub(crate) fn known(&self) -> HashSet<u64> {
        crate::sync::lock(&self.known).hashes.clone()
    }

    /// Notes that the build of `hash`, known, is about to be loaded unchecked: it stays out of
    /// the record until it loaded ([`CheckedBuilds::checked`], then the next write). One the
    /// initial scan took out already is out; any other (a reload back to a build checked
    /// before) is taken out of the file at once.
    pub(crate) fn loading_unchecked(&self, hash: u64) {
        let Some(path) = &self.path else { return };
        {
            let mut known = crate::sync::lock(&self.known);
            known.hashes.remove(&hash);
            known.new.retain(|new| *new != hash);
            let taken = known.taken.len();
            known.taken.retain(|taken| *taken != hash);
            if known.taken.len() != taken {
                return;
            }
        }
        let Some(mut file) = read_file(path) else { return };
        let plugin = format!("{hash:016x}");
        let before = file.builds.len();
        file.builds.retain(|kept| kept.hotsh != self.hotsh || kept.plugin != plugin);
        if file.builds.len() != before {
            write_file(path, &file);
        }
    }

    /// Notes that a check accepted the build of `hash` and it loaded here.
    pub(crate) fn checked(&self, hash: u64) {
        if self.path.is_none() {
            return;
        }
        let mut known = crate::sync::lock(&self.known);
        known.hashes.insert(hash);
        if !known.new.contains(&hash) {
            known.new.push(hash);
        }
    }

    /// Writes the builds loaded since the last write (and those taken out and not tried) into
    /// the record (merged with what another hotsh wrote meanwhile; beside it, then renamed
    /// over it). A record that cannot be written is logged: the builds are checked again at
    /// the next start.
    pub(crate) fn write(&self) {
        let Some(path) = &self.path else { return };
        let back: Vec<u64> = {
            let mut known = crate::sync::lock(&self.known);
            let taken = std::mem::take(&mut known.taken);
            taken.into_iter().chain(std::mem::take(&mut known.new)).collect()
        };
        if back.is_empty() {
            return;
        }
        let mut file = read_file(path).unwrap_or_default();
        for hash in back {
            let checked = Checked { hotsh: self.hotsh.clone(), plugin: format!("{hash:016x}") };
            file.builds.retain(|kept| *kept != checked);
            file.builds.push(checked);
        }
        let excess = file.builds.len().saturating_sub(MAX_KEPT);
        file.builds.drain(..excess);
        write_file(path, &file);
    }
}

/// The record at `path`; `None` when there is none or it cannot be read (warned about).
fn read_file(path: &Path) -> Option<File> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return None,
        Err(error) => {
            tracing::warn!(path = %path.display(), %error, "cannot read the plugin builds checked before; checking them again");
            return None;
        }
    };
    match serde_json::from_slice(&bytes) {
        Ok(file) => Some(file),
        Err(error) => {
            tracing::warn!(path = %path.display(), %error, "the record of plugin builds checked before is broken; checking them again");
            None
        }
    }
}

/// Replaces the record at `path` with `file`; a failure is logged (the builds are checked
/// again at the next start).
fn write_file(path: &Path, file: &File) {
    // Not synced: a record lost in a crash only costs a check.
    let written = serde_json::to_vec(file)
        .map_err(anyhow::Error::from)
        .and_then(|bytes| crate::dirs::replace_file(path, &bytes, false));
    if let Err(error) = written {
        tracing::warn!(path = %path.display(), "cannot keep the plugin builds checked: {error:#}");
    }
}

/// The running executable's file (the one started, even if a new build replaced it on disk
/// since): its device, inode, size and modification time. Any build or copy of hotsh has
/// another; `None` when it cannot be read.
fn executable_identity() -> Option<String> {
    use std::os::unix::fs::MetadataExt as _;
    let meta = std::fs::metadata(crate::executor::own_executable()).ok()?;
    Some(format!(
        "{}:{}:{}:{}.{:09}",
        meta.dev(),
        meta.ino(),
        meta.size(),
        meta.mtime(),
        meta.mtime_nsec()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An agent's start with the data directory `data`: the record read (and taken).
    fn start(data: &Path) -> CheckedBuilds {
        let record = CheckedBuilds::new(Some(data));
        record.read();
        record
    }

    #[test]
    fn builds_checked_are_known_to_the_same_hotsh_only_and_the_newest_are_kept() {
        let data = tempfile::tempdir().expect("temp dir");
        let record = start(data.path());
        assert!(!record.knows(7));
        record.checked(7);
        record.write();
        let again = start(data.path());
        assert!(again.knows(7) && !again.knows(8));
        again.checked(7);
        again.write();
        // Another hotsh (another identity) knows nothing of it.
        let other =
            CheckedBuilds { hotsh: "another".into(), ..CheckedBuilds::new(Some(data.path())) };
        other.read();
        assert!(!other.knows(7));
        // Past the bound, the oldest go.
        for hash in 100..100 + MAX_KEPT as u64 {
            again.checked(hash);
        }
        again.write();
        let kept = read_file(&data.path().join(FILE_NAME)).expect("a record").builds.len();
        assert_eq!(kept, MAX_KEPT);
        let last = start(data.path());
        assert!(!last.knows(7) && last.knows(100) && last.knows(99 + MAX_KEPT as u64));
    }

    #[test]
    fn a_build_loading_unchecked_is_out_of_the_record_until_it_loaded() {
        let data = tempfile::tempdir().expect("temp dir");
        let first = start(data.path());
        first.checked(7);
        first.checked(8);
        first.write();
        // A start takes what it knows out of the record...
        let loading = start(data.path());
        assert!(loading.knows(7) && loading.knows(8));
        // ...so an agent killed while loading them unchecked checks them at the next start.
        let after_a_crash = start(data.path());
        assert!(!after_a_crash.knows(7) && !after_a_crash.knows(8));
        // What loaded goes back; what was tried and did not load stays out.
        loading.loading_unchecked(7);
        loading.loading_unchecked(8);
        loading.checked(7);
        loading.write();
        let next = start(data.path());
        assert!(next.knows(7) && !next.knows(8));
        // A start that does not try a build it knows puts it back as it was.
        next.write();
        let untried = start(data.path());
        assert!(untried.knows(7));
        untried.checked(7);
        untried.write();
        // A reload of a known build takes it out of the file while it loads.
        untried.loading_unchecked(7);
        assert!(!untried.knows(7) && !start(data.path()).knows(7));
        untried.checked(7);
        untried.write();
        assert!(start(data.path()).knows(7));
    }

    #[test]
    fn a_broken_record_counts_as_empty_and_is_replaced() {
        let data = tempfile::tempdir().expect("temp dir");
        std::fs::write(data.path().join(FILE_NAME), b"{\"builds\": [tor").expect("written");
        let record = start(data.path());
        assert!(!record.knows(7));
        record.checked(7);
        record.write();
        assert!(start(data.path()).knows(7));
    }

    #[test]
    fn a_record_that_cannot_be_written_costs_only_a_check() {
        // A data directory that cannot be made (a file where its folder would be), as a full
        // or read-only disk refuses it: nothing is kept, and nothing fails.
        let base = tempfile::tempdir().expect("temp dir");
        std::fs::write(base.path().join("file"), b"").expect("written");
        let data = base.path().join("file").join("data");
        let record = start(&data);
        record.checked(7);
        record.write();
        assert!(!data.join(FILE_NAME).exists());
        assert!(!start(&data).knows(7));
    }

    #[test]
    fn without_a_data_directory_nothing_is_kept() {
        let record = CheckedBuilds::new(None);
        record.checked(7);
        record.write();
        assert!(!record.knows(7));
    }
}
