//! The session logs on disk: `<data dir>/sessions/<id>.jsonl` (see `log.rs` for the format).
//!
//! A log is written by one process at a time: opening it takes an exclusive `flock` on
//! `<id>.lock`, which also holds the pid of its holder, so a second process opening the same
//! session is refused with an error naming the first. The kernel releases the lock when its
//! holder exits, however it exits.

use super::fold::{self, Folded};
use super::log::{self, ReadError, Record, SessionMeta};
use super::writer::OpenLog;
use hotsh_core::usecase::{ThreadPart, ThreadParts};
use std::io::{Read as _, Seek as _, Write as _};
use std::os::fd::AsRawFd as _;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

/// Why a session could not be created, opened or listed. Each message names the file.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StoreError {
    #[error("no data directory for session logs: set HOME or HOTSH_DATA_DIR, or pass --data-dir")]
    NoDataDir,
    #[error("cannot use {path} for session logs: {source}")]
    Dir { path: PathBuf, source: std::io::Error },
    #[error("cannot create the session log {path}: {source}")]
    Create { path: PathBuf, source: std::io::Error },
    #[error("unknown session: {0}")]
    Unknown(String),
    #[error("session {id} is open in another hotsh process (pid {pid}); close it there first")]
    Busy { id: String, pid: String },
    #[error("cannot lock the session log {path}: {source}")]
    Lock { path: PathBuf, source: std::io::Error },
    #[error(transparent)]
    Read(#[from] ReadError),
    #[error("the session log {path} is not a hotsh session: {reason}")]
    NotASession { path: PathBuf, reason: String },
}

/// One session as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Summary {
    pub(crate) id: String,
    pub(crate) cwd: PathBuf,
    pub(crate) title: Option<String>,
    pub(crate) updated_at: std::time::SystemTime,
    /// A subagent's parent session.
    pub(crate) parent: Option<String>,
    /// The session it was forked from.
    pub(crate) forked_from: Option<String>,
}

/// The session logs of one data directory.
#[derive(Debug, Clone)]
pub(crate) struct SessionStore {
    data_dir: Option<PathBuf>,
}

impl SessionStore {
    pub(crate) fn new(data_dir: Option<PathBuf>) -> Self {
        Self { data_dir }
    }

    /// `<data dir>/sessions`, without creating it.
    pub(crate) fn dir(&self) -> Result<PathBuf, StoreError> {
        Ok(self.data_dir.as_ref().ok_or(StoreError::NoDataDir)?.join("sessions"))
    }

    /// `<data dir>/sessions`, created (0700) if needed.
    fn ensure_dir(&self) -> Result<PathBuf, StoreError> {
        let dir = self.dir()?;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|source| StoreError::Dir { path: dir.clone(), source })?;
        Ok(dir)
    }

    /// The log file of session `id`; refuses ids that are not session ids (no path tricks).
    pub(crate) fn path_of(&self, id: &str) -> Result<PathBuf, StoreError> {
        if uuid::Uuid::parse_str(id).is_err() {
            return Err(StoreError::Unknown(id.to_owned()));
        }
        Ok(self.dir()?.join(format!("{id}.jsonl")))
    }

    /// Creates the log of a new session, with its first record written and on disk.
    pub(crate) fn create(&self, meta: &SessionMeta) -> Result<OpenLog, StoreError> {
        let dir = self.ensure_dir()?;
        let path = dir.join(format!("{}.jsonl", meta.session_id));
        let lock = lock(&dir, &meta.session_id)?;
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(|source| StoreError::Create { path: path.clone(), source })?;
        let mut first = log::line(1, &Record::Fact(super::Fact::Session(Box::new(meta.clone()))))
            .map_err(|e| StoreError::Create { path: path.clone(), source: e.into() })?;
        first.push(b'\n');
        if let Err(source) = file.write_all(&first).and_then(|()| file.flush()) {
            let _ = std::fs::remove_file(&path);
            return Err(StoreError::Create { path, source });
        }
        Ok(OpenLog { path, file, lock, next_seq: 2, length: first.len() as u64 })
    }

    /// Opens an existing session's log for writing: locks it, reads it, cuts a torn last
    /// line off, and folds it. With `thread`, the thread goes there as it is folded (see
    /// [`hotsh_core::usecase::Backend::open`]), and the folded view holds only the rest.
    pub(crate) fn open(
        &self,
        id: &str,
        thread: Option<ThreadParts>,
    ) -> Result<(OpenLog, Folded), StoreError> {
        let path = self.path_of(id)?;
        if !path.exists() {
            return Err(StoreError::Unknown(id.to_owned()));
        }
        let dir = self.dir()?;
        let lock = lock(&dir, id)?;
        let mut streamed = Streamed::new(thread);
        // `None` until the first record, which starts the fold (or is not a session record).
        let mut folder: Option<Result<fold::Folder, fold::FoldError>> = None;
        let extent = log::read_each(&path, |record| match &mut folder {
            None => {
                let started = fold::Folder::new(Some(record));
                if let Ok(started) = &started {
                    streamed.send(ThreadPart::Folder(started.meta().cwd.clone()));
                }
                folder = Some(started);
            }
            Some(Ok(folder)) => {
                folder.push(record);
                streamed.pushed(folder);
            }
            Some(Err(_)) => {}
        })?;
        let folder = folder.unwrap_or(Err(fold::FoldError::NoSessionRecord));
        let folded = folder.map_err(|error| not_a_session(&path, &error))?.finish();
        let file = log::open_regular(&path, true)
            .map_err(|source| ReadError::Io { path: path.clone(), source })?;
        if extent.dropped_torn_line {
            file.set_len(extent.good_length)
                .map_err(|source| ReadError::Io { path: path.clone(), source })?;
        }
        let (next_seq, length) = (extent.last_seq + 1, extent.good_length);
        let open = OpenLog { path, file, lock, next_seq, length };
        Ok((open, folded))
    }

    /// Creates the log of `meta`'s session, a fork of session `source`: the source's records
    /// follow its own first record, read from the source's log as it is on disk now, less
    /// the live output of its commands (the bulk of a log; the cards keep what the model
    /// got). The fork then stands alone: deleting the source takes nothing from it.
    pub(crate) fn fork(
        &self,
        source: &str,
        meta: &SessionMeta,
    ) -> Result<(OpenLog, Folded), StoreError> {
        let path = self.path_of(source)?;
        if !path.exists() {
            return Err(StoreError::Unknown(source.to_owned()));
        }
        let records: Vec<Record> = log::read(&path)?
            .into_iter()
            .filter(|record| {
                !matches!(
                    record,
                    Record::Fact(super::Fact::Session(_))
                        | Record::Event(super::SessionEvent::ToolOutput { .. })
                )
            })
            .collect();
        let mut open = self.create(meta)?;
        let mut bytes = Vec::new();
        for (at, record) in records.iter().enumerate() {
            let line = log::line(open.next_seq + at as u64, record)
                .map_err(|e| StoreError::Create { path: open.path.clone(), source: e.into() })?;
            bytes.extend_from_slice(&line);
            bytes.push(b'\n');
        }
        if let Err(source) = open.file.write_all(&bytes).and_then(|()| open.file.flush()) {
            let _ = std::fs::remove_file(&open.path);
            return Err(StoreError::Create { path: open.path.clone(), source });
        }
        open.next_seq += records.len() as u64;
        open.length += bytes.len() as u64;
        let all = std::iter::once(Record::Fact(super::Fact::Session(Box::new(meta.clone()))))
            .chain(records)
            .collect();
        let folded = fold::fold(all).map_err(|error| StoreError::NotASession {
            path: open.path.clone(),
            reason: error.to_string(),
        })?;
        Ok((open, folded))
    }

    /// Removes session `id`'s log, once no process holds it (its lock taken first: a session
    /// open in another hotsh is refused, saying so).
    pub(crate) fn delete(&self, id: &str) -> Result<(), StoreError> {
        let path = self.path_of(id)?;
        if !path.exists() {
            return Err(StoreError::Unknown(id.to_owned()));
        }
        let dir = self.dir()?;
        let lock = lock(&dir, id)?;
        std::fs::remove_file(&path)
            .map_err(|source| StoreError::Dir { path: path.clone(), source })?;
        let _ = std::fs::remove_file(dir.join(format!("{id}.lock")));
        drop(lock);
        Ok(())
    }

    /// Reads a session's log without opening it for writing (for `hotsh sessions show`, and
    /// to replay a session open in this process).
    pub(crate) fn read(&self, id: &str) -> Result<Folded, StoreError> {
        let path = self.path_of(id)?;
        if !path.exists() {
            return Err(StoreError::Unknown(id.to_owned()));
        }
        fold_of(&path, log::read(&path)?)
    }

    /// Every session, newest first (by the time its log last changed), those of `cwd` only
    /// when given. Logs that cannot be read are skipped with a log line.
    pub(crate) fn list(&self, cwd: Option<&Path>) -> Result<Vec<Summary>, StoreError> {
        let dir = self.dir()?;
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => return Err(StoreError::Dir { path: dir, source }),
        };
        let mut sessions = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            let Some(id) =
                path.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_suffix(".jsonl"))
            else {
                continue;
            };
            match summary_of(id, &path) {
                Ok(summary) if cwd.is_none_or(|cwd| summary.cwd == cwd) => sessions.push(summary),
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(path = %path.display(), %error, "skipping a session log")
                }
            }
        }
        sessions.sort_by(|a, b| b.updated_at.cmp(&a.updated_at).then_with(|| a.id.cmp(&b.id)));
        Ok(sessions)
    }
}

fn fold_of(path: &Path, records: Vec<Record>) -> Result<Folded, StoreError> {
    fold::fold(records).map_err(|error| not_a_session(path, &error))
}

/// The log at `path` does not fold into a session.
fn not_a_session(path: &Path, error: &fold::FoldError) -> StoreError {
    StoreError::NotASession { path: path.to_owned(), reason: error.to_string() }
}

/// A thread going to a client as its log is folded.
struct Streamed {
    thread: Option<ThreadParts>,
    /// Records folded since the last part was sent.
    records: usize,
    /// How many records the next part takes.
    part: usize,
}

impl Streamed {
    /// How many records are folded before the first part of the thread is sent: the client
    /// sees the thread begin after a fraction of a millisecond.
    const FIRST_PART: usize = 128;
    /// The most records a part takes: each part after the first takes twice as many as the
    /// one before, up to this, so a long thread crosses from the reading thread to the one
    /// that sends it a few times, not once every 128 records (each crossing a wake-up of the
    /// other thread, which on two cores often preempts the reading itself).
    const LARGEST_PART: usize = 1024;

    fn new(thread: Option<ThreadParts>) -> Self {
        Self { thread, records: 0, part: Self::FIRST_PART }
    }

    /// A record was folded into `folder`: every so many, what is final goes.
    fn pushed(&mut self, folder: &mut fold::Folder) {
        self.records += 1;
        if self.thread.is_some() && self.records >= self.part {
            let events = folder.take_final();
            if !events.is_empty() {
                self.send(ThreadPart::Events(events));
            }
            self.records = 0;
            self.part = (self.part * 2).min(Self::LARGEST_PART);
        }
    }

    /// Sends `part`, waiting while the client is behind; a load given up takes no more.
    fn send(&mut self, part: ThreadPart) {
        if let Some(thread) = &self.thread
            && thread.blocking_send(part).is_err()
        {
            self.thread = None;
        }
    }
}

/// The summary of one log, read only as far as its first prompt.
fn summary_of(id: &str, path: &Path) -> Result<Summary, String> {
    let mut file = log::open_regular(path, false).map_err(|e| e.to_string())?;
    let updated_at = file.metadata().and_then(|m| m.modified()).map_err(|e| e.to_string())?;
    // The metadata record and the first prompt come early; 64 KiB holds them unless the
    // prompt is huge, in which case the whole file is read.
    let mut head = vec![0u8; 64 << 10];
    let read = file.read(&mut head).map_err(|e| e.to_string())?;
    head.truncate(read);
    let complete = head.iter().rposition(|&b| b == b'\n').map_or(0, |at| at + 1);
    let mut records = log::parse(path, &head[..complete]).map_err(|e| e.to_string())?;
    let has_prompt = records.iter().any(|r| matches!(r, Record::Fact(super::Fact::Prompt(_))));
    if !has_prompt && read == head.capacity() {
        let mut rest = Vec::new();
        file.rewind().and_then(|()| file.read_to_end(&mut rest)).map_err(|e| e.to_string())?;
        records = log::parse(path, &rest).map_err(|e| e.to_string())?;
    }
    let mut meta = None;
    let mut title = None;
    for record in &records {
        match record {
            Record::Fact(super::Fact::Session(m)) => meta = Some(m.clone()),
            Record::Fact(super::Fact::Prompt(prompt)) => {
                title = Some(super::title_of(&prompt.text));
                break;
            }
            _ => {}
        }
    }
    let meta = meta.ok_or("no session record")?;
    if meta.session_id != id {
        return Err(format!("it names session {}", meta.session_id));
    }
    // A subagent's thread is titled by its task's description.
    let title = meta.parent.as_ref().map(|parent| parent.description.clone()).or(title);
    Ok(Summary {
        id: id.to_owned(),
        cwd: meta.cwd,
        title,
        updated_at,
        parent: meta.parent.map(|parent| parent.session_id),
        forked_from: meta.forked_from,
    })
}

/// Takes the exclusive lock of session `id` in `dir`, writing this process's pid into the
/// lock file; refuses, naming the holder, when another process has it.
fn lock(dir: &Path, id: &str) -> Result<std::fs::File, StoreError> {
    let path = dir.join(format!("{id}.lock"));
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
        .map_err(|source| StoreError::Lock { path: path.clone(), source })?;
    // SAFETY: flock on a descriptor this function owns.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let error = std::io::Error::last_os_error();
        if error.kind() == std::io::ErrorKind::WouldBlock {
            let mut pid = String::new();
            let _ = file.read_to_string(&mut pid);
            let pid = pid.trim();
            return Err(StoreError::Busy {
                id: id.to_owned(),
                pid: if pid.is_empty() { "unknown".to_owned() } else { pid.to_owned() },
            });
        }
        return Err(StoreError::Lock { path, source: error });
    }
    // Written in place, padded to a width no pid exceeds, never truncated: ext4 writes a file
    // truncated since it was opened back to disk when it is closed (`auto_da_alloc`), which
    // cost a disk write per session when thousands close at exit.
    let pid = format!("{:<10}\n", std::process::id());
    use std::os::unix::fs::FileExt as _;
    let written = file.write_all_at(pid.as_bytes(), 0);
    written.map_err(|source| StoreError::Lock { path, source })?;
    Ok(file)
}
