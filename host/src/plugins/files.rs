//! The file services of one plugin call (`read_text_file`, `write_text_file`): text files read
//! through the client when it offers it (the user's unsaved buffer), else from disk; writes
//! gated by the session's sandbox mode like commands, then made through the client or to disk
//! through a temporary file renamed into place. The session remembers what the model last saw
//! of each file (a SHA-256 in its log), so a plugin can refuse an edit of a file that changed.

use super::gate::Action;
use super::services::CallServices;
use crate::sandbox::Mode;
use crate::session::{ClientFs, EventSink, Session};
use hotsh_abi::RString;
use hotsh_abi::v1 as abi;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Files larger than this are neither read nor written.
pub(crate) const MAX_FILE_BYTES: u64 = 32 << 20;

/// Bytes looked at for a NUL when telling a binary file from text.
const BINARY_SNIFF: usize = 8 << 10;

impl CallServices {
    fn session(&self) -> Option<&Arc<Session>> {
        self.sandbox.session.as_ref()
    }

    fn client_fs(&self) -> ClientFs {
        self.session().and_then(|s| s.sink()).map(|sink| sink.client_fs()).unwrap_or_default()
    }

    /// The client, for a file operation it offered.
    fn client(&self) -> Result<Arc<dyn EventSink>, String> {
        self.session().and_then(|s| s.sink()).ok_or_else(|| "the client went away".to_owned())
    }

    pub(super) fn read_file(&self, read: abi::FileRead) -> Result<abi::FileText, String> {
        let path = resolve(&self.sandbox.cwd, &read.path)?;
        let real = real_path(&path);
        let (text, from_client) = self.current_text(&path, &real)?;
        let sha256 = sha256_hex(&text);
        let seen = match self.session().and_then(|s| s.seen_file(&real)) {
            None => abi::Seen::Never,
            Some(seen) if seen == sha256 => abi::Seen::Same,
            Some(_) => abi::Seen::Changed,
        };
        if read.remember {
            self.remember(real, sha256)?;
        }
        let mut file = abi::FileText::default();
        file.path = display(&path).into();
        file.text = text.into();
        file.from_client = from_client;
        file.seen = seen;
        Ok(file)
    }

    pub(super) fn write_file(&self, write: abi::FileWrite) -> Result<abi::FileWritten, String> {
        let path = resolve(&self.sandbox.cwd, &write.path)?;
        let real = real_path(&path);
        if real.is_dir() {
            return Err(format!("{} is a directory, not a file", display(&path)));
        }
        if write.text.len() as u64 > MAX_FILE_BYTES {
            return Err(format!(
                "the new text of {} is {} bytes; files over {} MiB are not written",
                display(&path),
                write.text.len(),
                MAX_FILE_BYTES >> 20
            ));
        }
        let action = Action {
            what: display(&real),
            workdir: display(&self.sandbox.cwd),
            writes_file: true,
            request: write.sandbox_permissions.clone().into_option(),
        };
        let (sandbox, cancel) = (self.sandbox.clone(), self.cancel.clone());
        let gate = self.runtime(async move { sandbox.gate(&action, &cancel).await })??;
        let allowed = self.sandbox.sandbox.may_write(gate.mode, &self.sandbox.cwd, &real);
        let existed = real.exists();
        let written = |written: bool, through_client: bool| {
            let mut outcome = abi::FileWritten::default();
            outcome.path = display(&real).into();
            outcome.written = written;
            outcome.created = !existed;
            outcome.through_client = through_client;
            outcome.sandbox = gate.write_facts(allowed);
            outcome
        };
        if !allowed {
            return Ok(written(false, false));
        }
        if let Some(expected) = write.expected.as_ref().into_option() {
            if !existed {
                return Err(format!(
                    "{} no longer exists (it was deleted after you read it); nothing was written",
                    display(&path)
                ));
            }
            let (current, _) = self.current_text(&path, &real)?;
            if current != expected.as_str() {
                return Err(format!(
                    "{} changed while it was being edited; nothing was written. Read it again, then redo the edit",
                    display(&path)
                ));
            }
        }
        // From here on the file is reached through descriptors of the directories of the
        // path just checked, opened without following links: a directory swapped for a link
        // since the check (a background task can do that in a loop) is refused, not followed.
        let parent = real.parent().unwrap_or(Path::new("/"));
        let directory = crate::nofollow::open_directory(parent, true).map_err(|e| {
            format!("cannot open the directory {}: {e}; nothing was written", parent.display())
        })?;
        let confined = gate.mode != Mode::DangerFullAccess && self.sandbox.sandbox.offered();
        let mut through_client = false;
        if self.client_fs().write {
            // The client writes by path and follows links. With no confined command running
            // (and none able to start meanwhile) nothing can swap one in; else the host
            // writes on disk itself, and the editor sees the file change there.
            let sink = self.client()?;
            let (target, text) = (real.clone(), write.text.to_string());
            let executor = std::sync::Arc::clone(&self.executor);
            let client_write = async move {
                let write = sink.write_text_file(target, text);
                if !confined {
                    return Some(write.await);
                }
                let _paused = executor.pause_confined().await?;
                Some(write.await)
            };
            if let Some(result) = self.runtime(client_write)? {
                result.map_err(|e| {
                    format!(
                        "the editor could not write {}: {e}; the file is unchanged",
                        display(&path)
                    )
                })?;
                through_client = true;
            }
        }
        if !through_client {
            let name = real.file_name().unwrap_or_default();
            write_atomically(&directory, Path::new(name), write.text.as_bytes()).map_err(|e| {
                format!("cannot write {}: {e}; the file is unchanged", display(&path))
            })?;
        }
        self.remember(real.clone(), sha256_hex(&write.text))?;
        Ok(written(true, through_client))
    }

    /// The file's text now: the client's buffer when the client reads files, else the disk.
    /// Either way the file must be a readable text file on disk within the size bound.
    fn current_text(&self, path: &Path, real: &Path) -> Result<(String, bool), String> {
        check_readable(path, real)?;
        if self.client_fs().read {
            let sink = self.client()?;
            let target = path.to_owned();
            let text = self
                .runtime(async move { sink.read_text_file(target).await })?
                .map_err(|e| format!("the editor could not read {}: {e}", display(path)))?;
            return Ok((text, true));
        }
        Ok((disk_text(path, real)?, false))
    }

    fn remember(&self, real: PathBuf, sha256: String) -> Result<(), String> {
        let Some(session) = self.session().cloned() else { return Ok(()) };
        self.runtime(async move { session.remember_file(real, sha256).await })
    }

    /// [`CallServices::on_runtime`] with its error as text.
    fn runtime<T: Send + 'static>(
        &self,
        future: impl std::future::Future<Output = T> + Send + 'static,
    ) -> Result<T, String> {
        self.on_runtime(future).map_err(RString::into_string)
    }
}

/// `path` made absolute against `cwd` (`.` and `..` taken out, symlinks not followed).
fn resolve(cwd: &Path, path: &str) -> Result<PathBuf, String> {
    if path.is_empty() {
        return Err("the path is empty".to_owned());
    }
    if path.contains('\0') {
        return Err("the path contains a NUL character".to_owned());
    }
    Ok(hotsh_abi::v1::absolute_path(cwd, path))
}

/// `path` with every symlink resolved: the file's own real path when it exists; for a path
/// that does not exist yet (or a dangling link), its nearest real ancestor with the rest
/// appended, links followed.
fn real_path(path: &Path) -> PathBuf {
    fn resolve_links(path: &Path, depth: u32) -> PathBuf {
        if let Ok(real) = std::fs::canonicalize(path) {
            return real;
        }
        if depth < 40
            && let Ok(target) = std::fs::read_link(path)
        {
            let parent = path.parent().unwrap_or(Path::new("/"));
            return resolve_links(&parent.join(target), depth + 1);
        }
        match (path.parent(), path.file_name()) {
            (Some(parent), Some(name)) => resolve_links(parent, depth).join(name),
            _ => path.to_owned(),
        }
    }
    resolve_links(path, 0)
}

fn check_readable(path: &Path, real: &Path) -> Result<(), String> {
    let metadata = std::fs::metadata(real).map_err(|error| match error.kind() {
        std::io::ErrorKind::NotFound => format!("{}: no such file", display(path)),
        _ => format!("{} cannot be read: {error}", display(path)),
    })?;
    if metadata.is_dir() {
        return Err(format!(
            "{} is a directory, not a file; list it with bash (`ls`)",
            display(path)
        ));
    }
    if !metadata.is_file() {
        return Err(format!("{} is not a regular file", display(path)));
    }
    if metadata.len() > MAX_FILE_BYTES {
        return Err(format!(
            "{} is {} bytes; files over {} MiB are not read whole (use bash: `head`, `sed -n`, `grep`)",
            display(path),
            metadata.len(),
            MAX_FILE_BYTES >> 20
        ));
    }
    Ok(())
}

/// The text of a file [`check_readable`] accepted.
fn disk_text(path: &Path, real: &Path) -> Result<String, String> {
    let bytes = std::fs::read(real).map_err(|error| match error.kind() {
        std::io::ErrorKind::NotFound => format!("{}: no such file", display(path)),
        _ => format!("{} cannot be read: {error}", display(path)),
    })?;
    let binary = || {
        format!(
            "{} looks like a binary file (not UTF-8 text); only text files are read and edited here",
            display(path)
        )
    };
    if bytes[..bytes.len().min(BINARY_SNIFF)].contains(&0) {
        return Err(binary());
    }
    String::from_utf8(bytes).map_err(|_| binary())
}

/// Writes `bytes` to a temporary file in `directory`, flushes it to the disk, gives it the
/// old file's permissions (or 0666 less the umask for a new file), and renames it over `name`
/// there: a reader sees the old file or the new one, never a part; a failure (a full disk)
/// leaves the old file as it was. Nothing is followed: a link now at `name` is replaced, not
/// written through.
fn write_atomically(
    directory: &std::os::fd::OwnedFd,
    name: &Path,
    bytes: &[u8],
) -> std::io::Result<()> {
    use rustix::fs::{AtFlags, Mode, OFlags};
    let old = rustix::fs::statat(directory, name, AtFlags::SYMLINK_NOFOLLOW).ok();
    let temporary = format!(".{}.hotsh-{}", name.display(), uuid::Uuid::new_v4().simple());
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let file = rustix::fs::openat(directory, &temporary, flags, Mode::from_raw_mode(0o666))?;
    let mut file = std::fs::File::from(file);
    let written = (|| {
        file.write_all(bytes)?;
        if let Some(old) = old.filter(|old| old.st_mode & libc::S_IFMT == libc::S_IFREG) {
            rustix::fs::fchmod(&file, Mode::from_raw_mode(old.st_mode & 0o7777))?;
        }
        file.sync_all()?;
        rustix::fs::renameat(directory, &temporary, directory, name)?;
        Ok(())
    })();
    if written.is_err() {
        let _ = rustix::fs::unlinkat(directory, &temporary, AtFlags::empty());
    }
    written
}

fn display(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

/// The SHA-256 of `text`, in hex.
fn sha256_hex(text: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
    digest.as_ref().iter().map(|byte| format!("{byte:02x}")).collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn paths_resolve_against_the_cwd_without_dots() {
        let cwd = Path::new("/work/project");
        assert_eq!(resolve(cwd, "src/../a.rs").unwrap(), PathBuf::from("/work/project/a.rs"));
        assert_eq!(resolve(cwd, "/etc/./hosts").unwrap(), PathBuf::from("/etc/hosts"));
        assert_eq!(resolve(cwd, "../../../x").unwrap(), PathBuf::from("/x"));
        assert!(resolve(cwd, "a\0b").unwrap_err().contains("NUL"));
        assert!(resolve(cwd, "").is_err());
    }

    #[test]
    fn real_paths_follow_links_even_to_files_not_there_yet() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let outside = tempfile::tempdir().unwrap();
        let outside_root = std::fs::canonicalize(outside.path()).unwrap();
        std::os::unix::fs::symlink(outside_root.join("target.txt"), root.join("dangling")).unwrap();
        std::os::unix::fs::symlink(&outside_root, root.join("dir-link")).unwrap();
        assert_eq!(real_path(&root.join("dangling")), outside_root.join("target.txt"));
        assert_eq!(real_path(&root.join("dir-link/new/file")), outside_root.join("new/file"));
        assert_eq!(real_path(&root.join("plain.txt")), root.join("plain.txt"));
    }

    #[test]
    fn an_atomic_write_keeps_permissions_and_leaves_no_temporary_file() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("script.sh");
        std::fs::write(&file, "old").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o750)).unwrap();
        let directory =
            crate::nofollow::open_directory(&std::fs::canonicalize(dir.path()).unwrap(), false)
                .unwrap();
        write_atomically(&directory, Path::new("script.sh"), b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "new");
        assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o750);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn sha256_is_the_standard_digest() {
        assert_eq!(
            sha256_hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
