//! The one writer of a session's log: a thread of its own that owns the file (the file is
//! written with blocking calls, never on a runtime worker; a disk that stalls stalls this
//! session's log, and the session once [`MAX_PENDING`] records wait). Records are handed
//! over in batches: an append only queues its record, and the writer is woken when a batch
//! is full or the session asks for a flush, not once per record (a streamed answer is
//! thousands of records, and waking a thread for each cost more than writing them).
//!
//! Records are buffered and written when the session asks for a flush (at the end of a turn,
//! when a card closes) or when the buffer fills. If a write fails (a full disk), the file is cut
//! back to the last complete flush, so it never holds half a record; the writer then refuses
//! further records and every flush reports the failure, naming the file and the cause.

use super::log::{self, Record};
use crate::sync::lock;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, oneshot};

/// Commands waiting for the writer at most.
const CHANNEL: usize = 64;
/// Records queued before the writer is woken to take them.
const BATCH: usize = 64;
/// Records queued at most; a slow disk then slows the session down.
const MAX_PENDING: usize = 1024;
/// Bytes buffered before a write.
const BUFFER: usize = 256 << 10;

/// What the writer is asked to do; each takes the records queued so far first.
enum Command {
    /// A batch is full.
    Take,
    Flush(oneshot::Sender<Result<(), String>>),
    Close(oneshot::Sender<()>),
}

/// Records appended and not yet taken by the writer, in order.
#[derive(Debug, Default)]
struct Pending {
    records: Mutex<Vec<Record>>,
    /// Woken each time the writer takes the queue.
    taken: tokio::sync::Notify,
}

/// The handle to a session's writer task.
#[derive(Debug)]
pub(crate) struct LogWriter {
    commands: mpsc::Sender<Command>,
    pending: Arc<Pending>,
    path: PathBuf,
    failure: Arc<Mutex<Option<String>>>,
}

/// An opened log, ready for a writer.
#[derive(Debug)]
pub(crate) struct OpenLog {
    pub(crate) path: PathBuf,
    pub(crate) file: std::fs::File,
    /// Held for as long as the log is open here (see `store.rs`).
    pub(crate) lock: std::fs::File,
    /// The `seq` of the next record.
    pub(crate) next_seq: u64,
    /// The file's length: everything in it is complete records.
    pub(crate) length: u64,
}

impl LogWriter {
    /// Starts the writer thread of an opened log.
    pub(crate) fn start(open: OpenLog) -> Self {
        let (commands, received) = mpsc::channel(CHANNEL);
        let failure = Arc::new(Mutex::new(None));
        let pending = Arc::new(Pending::default());
        let path = open.path.clone();
        let (failed, queue) = (Arc::clone(&failure), Arc::clone(&pending));
        let started = std::thread::Builder::new().name("session-log".to_owned()).spawn(move || {
            let _childless = crate::executor::childless_thread();
            run(open, received, &queue, &failed)
        });
        if let Err(error) = started {
            let message =
                format!("cannot start the writer of the session log {}: {error}", path.display());
            tracing::error!("{message}");
            *lock(&failure) = Some(message);
        }
        Self { commands, pending, path, failure }
    }

    /// Queues a record, waking the writer when a batch is full (and waiting while
    /// [`MAX_PENDING`] records wait for it).
    pub(crate) async fn append(&self, record: Record) {
        if self.commands.is_closed() {
            // No writer: it has said why in its failure.
            return;
        }
        let queued = {
            let mut records = lock(&self.pending.records);
            records.push(record);
            records.len()
        };
        if queued % BATCH == 0 {
            // A closed writer has said why in its failure; nothing more to do here.
            let _ = self.commands.send(Command::Take).await;
        }
        while lock(&self.pending.records).len() >= MAX_PENDING && !self.commands.is_closed() {
            let taken = self.pending.taken.notified();
            tokio::pin!(taken);
            taken.as_mut().enable();
            if lock(&self.pending.records).len() < MAX_PENDING {
                break;
            }
            taken.await;
        }
    }

    /// Writes everything queued so far to the file.
    pub(crate) async fn flush(&self) -> Result<(), String> {
        let (done, result) = oneshot::channel();
        if self.commands.send(Command::Flush(done)).await.is_err() {
            return Err(self
                .failure()
                .unwrap_or_else(|| format!("the session log {} is closed", self.path.display())));
        }
        result
            .await
            .unwrap_or_else(|_| Err(format!("the session log {} is closed", self.path.display())))
    }

    /// Why the log cannot be written, once a write has failed.
    pub(crate) fn failure(&self) -> Option<String> {
        lock(&self.failure).clone()
    }

    /// Flushes, closes the file and releases the lock.
    pub(crate) async fn close(&self) {
        let (done, closed) = oneshot::channel();
        if self.commands.send(Command::Close(done)).await.is_ok() {
            let _ = closed.await;
        }
    }
}

fn run(
    open: OpenLog,
    mut commands: mpsc::Receiver<Command>,
    pending: &Pending,
    failure: &Mutex<Option<String>>,
) {
    let OpenLog { path, file, lock: held, mut next_seq, length } = open;
    let mut file = file;
    let mut buffer: Vec<u8> = Vec::with_capacity(BUFFER);
    // Everything up to here is complete records on disk.
    let mut durable = length;
    let mut failed = false;
    // A command's output is logged once (see `log.rs`, `tool_result`).
    let mut shared = log::SharedOutput::default();
    // Takes the queued records into the buffer, writing it out whenever it fills.
    let mut take = |file: &mut std::fs::File,
                    buffer: &mut Vec<u8>,
                    durable: &mut u64,
                    failed: &mut bool| {
        let records = std::mem::take(&mut *lock(&pending.records));
        pending.taken.notify_waiters();
        for record in records {
            if *failed {
                return;
            }
            let record = shared.share(record);
            match log::line(next_seq, &record) {
                Ok(line) => {
                    buffer.extend_from_slice(&line);
                    buffer.push(b'\n');
                    next_seq += 1;
                }
                Err(error) => {
                    tracing::error!(path = %path.display(), %error, "cannot serialise a log record");
                }
            }
            if buffer.len() >= BUFFER {
                *failed = !write_out(&path, file, buffer, durable, failure);
            }
        }
    };
    while let Some(command) = commands.blocking_recv() {
        take(&mut file, &mut buffer, &mut durable, &mut failed);
        match command {
            Command::Take => {}
            Command::Flush(done) => {
                if !failed {
                    failed = !write_out(&path, &mut file, &mut buffer, &mut durable, failure);
                }
                let result = match lock(failure).clone() {
                    Some(failure) => Err(failure),
                    None => Ok(()),
                };
                let _ = done.send(result);
            }
            Command::Close(done) => {
                if !failed {
                    write_out(&path, &mut file, &mut buffer, &mut durable, failure);
                }
                // Closed and unlocked before the close is answered: whoever waited for it (a
                // delete right after, another hotsh loading it) finds the log free.
                drop(file);
                drop(held);
                let _ = done.send(());
                return;
            }
        }
    }
    take(&mut file, &mut buffer, &mut durable, &mut failed);
    if !failed {
        write_out(&path, &mut file, &mut buffer, &mut durable, failure);
    }
}

/// Writes the buffer; on failure, cuts the file back to its last complete record and records
/// why. Returns whether the write succeeded.
fn write_out(
    path: &Path,
    file: &mut std::fs::File,
    buffer: &mut Vec<u8>,
    durable: &mut u64,
    failure: &Mutex<Option<String>>,
) -> bool {
    if buffer.is_empty() {
        return true;
    }
    let written = std::io::Write::write_all(file, buffer);
    match written {
        Ok(()) => {
            *durable += buffer.len() as u64;
            buffer.clear();
            true
        }
        Err(error) => {
            let message = format!(
                "cannot write the session log {}: {error}; what happened since its last complete \
                 record is not saved",
                path.display()
            );
            tracing::error!("{message}");
            if let Err(error) = file.set_len(*durable) {
                tracing::error!(path = %path.display(), %error, "cannot cut the session log back to its last complete record");
            }
            buffer.clear();
            *lock(failure) = Some(message);
            false
        }
    }
}

use hotsh_core::session::LogFailed;

impl hotsh_core::session::LogSink for LogWriter {
    fn append(&self, record: Record) -> futures::future::BoxFuture<'_, ()> {
        Box::pin(LogWriter::append(self, record))
    }

    fn flush(&self) -> futures::future::BoxFuture<'_, Result<(), LogFailed>> {
        Box::pin(async { LogWriter::flush(self).await.map_err(LogFailed) })
    }

    fn failure(&self) -> Option<LogFailed> {
        LogWriter::failure(self).map(LogFailed)
    }

    fn close(&self) -> futures::future::BoxFuture<'_, ()> {
        Box::pin(LogWriter::close(self))
    }
}
