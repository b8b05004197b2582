//! The one writer of a session's log: a task of the runtime that owns the file and does each
//! piece of work (serialising a batch, writing it) on the blocking pool, never on a runtime
//! worker (closing an idle log, which writes nothing, is done in place): a disk that stalls
//! stalls this session's log, and the session once [`MAX_PENDING`] records wait. An idle log
//! holds no thread (a client with thousands of sessions open would otherwise cost a thread
//! each, and the exit would pay for them). Records are handed over in batches: an append only queues
//! its record, and the writer is woken when a batch is full or the session asks for a flush,
//! not once per record (a streamed answer is thousands of records, and waking the writer for
//! each cost more than writing them).
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
    /// Starts the writer of an opened log, a task of the current runtime (sessions are only
    /// opened by the host's async use cases).
    pub(crate) fn start(open: OpenLog) -> Self {
        let (commands, received) = mpsc::channel(CHANNEL);
        let failure = Arc::new(Mutex::new(None));
        let pending = Arc::new(Pending::default());
        let path = open.path.clone();
        let writer = Writer::new(open, Arc::clone(&pending), Arc::clone(&failure));
        tokio::spawn(run(writer, received));
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

/// The writer's state: the file and what is buffered for it.
struct Writer {
    path: PathBuf,
    file: std::fs::File,
    /// Held for as long as the log is open here (see `store.rs`); released before a close is
    /// answered, so that what follows the close (a delete) finds it free.
    lock: Option<std::fs::File>,
    next_seq: u64,
    buffer: Vec<u8>,
    /// Everything up to here is complete records on disk.
    durable: u64,
    failed: bool,
    /// A command's output is logged once (see `log.rs`, `tool_result`).
    shared: log::SharedOutput,
    pending: Arc<Pending>,
    failure: Arc<Mutex<Option<String>>>,
}

impl Writer {
    fn new(open: OpenLog, pending: Arc<Pending>, failure: Arc<Mutex<Option<String>>>) -> Self {
        let OpenLog { path, file, lock, next_seq, length } = open;
        Self {
            path,
            file,
            lock: Some(lock),
            next_seq,
            buffer: Vec::new(),
            durable: length,
            failed: false,
            shared: log::SharedOutput::default(),
            pending,
            failure,
        }
    }

    /// Takes the queued records into the buffer, writing it out whenever it fills.
    fn take(&mut self) {
        let records = std::mem::take(&mut *lock(&self.pending.records));
        self.pending.taken.notify_waiters();
        for record in records {
            if self.failed {
                return;
            }
            let record = self.shared.share(record);
            match log::line(self.next_seq, &record) {
                Ok(line) => {
                    self.buffer.extend_from_slice(&line);
                    self.buffer.push(b'\n');
                    self.next_seq += 1;
                }
                Err(error) => {
                    tracing::error!(path = %self.path.display(), %error, "cannot serialise a log record");
                }
            }
            if self.buffer.len() >= BUFFER {
                self.write_out();
            }
        }
    }

    /// Writes the buffer out (once nothing has failed); whether everything is on disk.
    fn write_out(&mut self) -> bool {
        if !self.failed {
            self.failed = !write_out(
                &self.path,
                &mut self.file,
                &mut self.buffer,
                &mut self.durable,
                &self.failure,
            );
        }
        !self.failed
    }

    /// Does what `command` asks (the records queued first); `false` once the log is closed.
    fn handle(&mut self, command: Command) -> bool {
        self.take();
        match command {
            Command::Take => true,
            Command::Flush(done) => {
                self.write_out();
                let result = match lock(&self.failure).clone() {
                    Some(failure) => Err(failure),
                    None => Ok(()),
                };
                let _ = done.send(result);
                true
            }
            Command::Close(done) => {
                self.write_out();
                drop(self.lock.take());
                let _ = done.send(());
                false
            }
        }
    }

    /// The session is gone without closing its log: what it queued is written.
    fn finish(&mut self) {
        self.take();
        self.write_out();
    }
}

/// The writer as a task: each command that has something to write is done on the blocking
/// pool, the state handed there and back (so no thread waits while the log is idle); one
/// with nothing to write (closing an idle log, as thousands are at exit) is done here, since
/// it makes no call that can block but `close(2)` of a local file.
async fn run(mut writer: Writer, mut commands: mpsc::Receiver<Command>) {
    while let Some(command) = commands.recv().await {
        if writer.buffer.is_empty() && lock(&writer.pending.records).is_empty() {
            if writer.handle(command) {
                continue;
            }
            return;
        }
        let done = tokio::task::spawn_blocking(move || {
            let open = writer.handle(command);
            (writer, open)
        })
        .await;
        match done {
            Ok((back, true)) => writer = back,
            Ok((_, false)) => return,
            Err(error) => {
                tracing::error!(%error, "the session log's writer failed");
                return;
            }
        }
    }
    let _ = tokio::task::spawn_blocking(move || writer.finish()).await;
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
