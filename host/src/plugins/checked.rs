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
    /// Those checked since the record was last written.
    new: Vec<u64>,
}

impl CheckedBuilds {
    /// The record of `data_dir` for the running executable.
    pub(crate) fn new(data_dir: Option<&Path>) -> Self {
        let hotsh = executable_identity();
        let path = data_dir.filter(|_| hotsh.is_some()).map(|dir| dir.join(FILE_NAME));
        Self { path, hotsh: hotsh.unwrap_or_default(), known: Mutex::default() }
    }

    /// Reads what this hotsh checked before. A record that cannot be read is warned about and
    /// counts as empty (the next write replaces it).
    pub(crate) fn read(&self) {
        let Some(file) = self.path.as_deref().and_then(read_file) else { return };
        let hashes = file
            .builds
            .iter()
            .filter(|checked| checked.hotsh == self.hotsh)
            .filter_map(|checked| u64::from_str_radix(&checked.plugin, 16).ok());
        crate::sync::lock(&self.known).hashes.extend(hashes);
    }

    /// Whether this hotsh checked the build of content hash `hash` before.
    pub(crate) fn knows(&self, hash: u64) -> bool {
        crate::sync::lock(&self.known).hashes.contains(&hash)
    }

    /// The hashes this hotsh checked, for a check begun on another thread.
    pub(crate) fn known(&self) -> HashSet<u64> {
        crate::sync::lock(&self.known).hashes.clone()
    }

    /// Notes that a check accepted the build of `hash` and it loaded here.
    pub(crate) fn checked(&self, hash: u64) {
        if self.path.is_none() {
            return;
        }
        let mut known = crate::sync::lock(&self.known);
        if known.hashes.insert(hash) {
            known.new.push(hash);
        }
    }

    /// Writes the builds checked since the last write into the record (merged with what
    /// another hotsh wrote meanwhile; beside it, then renamed over it). A record that cannot
    /// be written is logged: the builds are checked again at the next start.
    pub(crate) fn write(&self) {
        let Some(path) = &self.path else { return };
        let new = std::mem::take(&mut crate::sync::lock(&self.known).new);
        if new.is_empty() {
            return;
        }
        let mut file = read_file(path).unwrap_or_default();
        for hash in new {
            let checked = Checked { hotsh: self.hotsh.clone(), plugin: format!("{hash:016x}") };
            file.builds.retain(|kept| *kept != checked);
            file.builds.push(checked);
        }
        let excess = file.builds.len().saturating_sub(MAX_KEPT);
        file.builds.drain(..excess);
        if let Err(error) = write_file(path, &file) {
            tracing::warn!(path = %path.display(), "cannot keep the plugin builds checked: {error:#}");
        }
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

fn write_file(path: &Path, file: &File) -> anyhow::Result<()> {
    use anyhow::Context as _;
    let dir = path.parent().context("the record has a folder")?;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot make {}", dir.display()))?;
    // Not synced: a record lost in a crash only costs a check.
    let mut temp = tempfile::NamedTempFile::new_in(dir)
        .with_context(|| format!("cannot write in {}", dir.display()))?;
    serde_json::to_writer(&mut temp, file)?;
    temp.persist(path)?;
    Ok(())
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

    #[test]
    fn builds_checked_are_known_to_the_same_hotsh_only_and_the_newest_are_kept() {
        let data = tempfile::tempdir().expect("temp dir");
        let record = CheckedBuilds::new(Some(data.path()));
        record.read();
        assert!(!record.knows(7));
        record.checked(7);
        record.write();
        let again = CheckedBuilds::new(Some(data.path()));
        again.read();
        assert!(again.knows(7) && !again.knows(8));
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
        let last = CheckedBuilds::new(Some(data.path()));
        last.read();
        assert!(!last.knows(7) && last.knows(100) && last.knows(99 + MAX_KEPT as u64));
        let kept = read_file(&data.path().join(FILE_NAME)).expect("a record").builds.len();
        assert_eq!(kept, MAX_KEPT);
    }

    #[test]
    fn a_broken_record_counts_as_empty_and_is_replaced() {
        let data = tempfile::tempdir().expect("temp dir");
        std::fs::write(data.path().join(FILE_NAME), b"{\"builds\": [tor").expect("written");
        let record = CheckedBuilds::new(Some(data.path()));
        record.read();
        assert!(!record.knows(7));
        record.checked(7);
        record.write();
        let again = CheckedBuilds::new(Some(data.path()));
        again.read();
        assert!(again.knows(7));
    }

    #[test]
    fn without_a_data_directory_nothing_is_kept() {
        let record = CheckedBuilds::new(None);
        record.checked(7);
        record.write();
        assert!(!record.knows(7));
    }
}
