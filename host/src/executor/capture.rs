//! What a command's output becomes: a bounded view for the model (head and tail of each
//! stream), the full merged stream in a spill file (itself bounded), and nothing else kept.
//!
//! Spill files are written through `tokio::fs`, whose writes run on the blocking pool: a slow
//! temp directory slows the command's output (its pipe fills), never the runtime's workers.
//! Files are created readable by this user only (0600), never through an existing name or a
//! symbolic link, in directories only this user can enter (0700).

use hotsh_core::executor::SpillSummary;
use std::path::{Path, PathBuf};
use tokio::fs::File;
use tokio::io::AsyncWriteExt as _;

/// Limits of one command's captured output.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CaptureLimits {
    /// Bytes of stdout plus stderr the model sees at most (markers aside).
    pub(crate) model_budget: usize,
    /// Bytes the spill file holds at most.
    pub(crate) spill_cap: u64,
}

/// One stream's bytes, kept as a bounded head and a bounded tail.
#[derive(Debug, Default)]
struct StreamCapture {
    head: Vec<u8>,
    /// The most recent bytes after the head; trimmed from the front in batches.
    tail: Vec<u8>,
    total: u64,
}

impl StreamCapture {
    fn push(&mut self, mut bytes: &[u8], keep: usize) {
        self.total += bytes.len() as u64;
        let head_room = keep.saturating_sub(self.head.len());
        if head_room > 0 {
            let taken = head_room.min(bytes.len());
            self.head.extend_from_slice(&bytes[..taken]);
            bytes = &bytes[taken..];
        }
        if bytes.is_empty() {
            return;
        }
        self.tail.extend_from_slice(bytes);
        // Trim only when the tail holds twice what it keeps, so trimming stays amortised O(1).
        if self.tail.len() > 2 * keep {
            let excess = self.tail.len() - keep;
            self.tail.drain(..excess);
        }
    }

    /// The stream cut to `allowance` bytes: head, a marker naming the omitted bytes, tail.
    fn render(&self, allowance: usize) -> (String, bool) {
        let held = self.head.len() + self.tail.len();
        if self.total as usize <= allowance && self.total as usize == held {
            let mut all = self.head.clone();
            all.extend_from_slice(&self.tail);
            return (String::from_utf8_lossy(&all).into_owned(), false);
        }
        let head_part = (allowance / 2).min(self.head.len());
        let tail_part = (allowance - head_part).min(self.tail.len());
        let tail_bytes = &self.tail[self.tail.len() - tail_part..];
        let omitted = self.total - head_part as u64 - tail_part as u64;
        let head = String::from_utf8_lossy(&self.head[..head_part]);
        let tail = String::from_utf8_lossy(tail_bytes);
        let text = format!("{head}\n[… {omitted} bytes omitted …]\n{tail}");
        (text, true)
    }
}

/// Which stream a chunk came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stream {
    Stdout,
    Stderr,
}

/// Everything kept of one command's output while it runs.
#[derive(Debug)]
pub(crate) struct OutputCapture {
    limits: CaptureLimits,
    stdout: StreamCapture,
    stderr: StreamCapture,
    spill: SpillFile,
}

/// The captured output in the form the model sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CapturedOutput {
    pub(crate) stdout: String,
    pub(crate) stderr: String,
    pub(crate) truncated: bool,
    pub(crate) spill: Option<SpillSummary>,
    pub(crate) total_bytes: u64,
}

impl OutputCapture {
    /// The spill file is created only once the output outgrows the model's view.
    pub(crate) fn new(limits: CaptureLimits, spill_path: PathBuf) -> Self {
        Self {
            limits,
            stdout: StreamCapture::default(),
            stderr: StreamCapture::default(),
            spill: SpillFile::lazy(spill_path, limits.spill_cap, limits.model_budget),
        }
    }

    pub(crate) async fn push(&mut self, stream: Stream, bytes: &[u8]) {
        let keep = self.limits.model_budget;
        match stream {
            Stream::Stdout => self.stdout.push(bytes, keep),
            Stream::Stderr => self.stderr.push(bytes, keep),
        }
        self.spill.write(bytes).await;
    }

    pub(crate) async fn finish(self) -> CapturedOutput {
        let budget = self.limits.model_budget;
        let (stdout_share, stderr_share) =
            share_budget(self.stdout.total as usize, self.stderr.total as usize, budget);
        let (stdout, cut_out) = self.stdout.render(stdout_share);
        let (stderr, cut_err) = self.stderr.render(stderr_share);
        CapturedOutput {
            stdout,
            stderr,
            truncated: cut_out || cut_err,
            spill: self.spill.finish().await,
            total_bytes: self.stdout.total + self.stderr.total,
        }
    }
}

/// Bytes gathered before a write to a spill file.
const WRITE_BUFFER: usize = 1 << 20;

/// A file receiving a command's full merged output, up to a cap.
#[derive(Debug)]
pub(crate) struct SpillFile {
    path: PathBuf,
    cap: u64,
    state: SpillState,
    /// Every write reaches the file at once (a background task's output is read while it
    /// runs); otherwise writes are gathered.
    write_through: bool,
}

#[derive(Debug)]
enum SpillState {
    /// Not created yet: the output so far, while it stays under the threshold.
    Pending { buffered: Vec<u8>, threshold: usize },
    Open {
        /// Buffered: each write to the file is a trip to the blocking pool.
        file: tokio::io::BufWriter<File>,
        written: u64,
    },
    /// The file could not be written; reports name it `(unavailable)`.
    Failed,
}

impl SpillFile {
    /// Created only when more than `threshold` bytes arrive.
    pub(crate) fn lazy(path: PathBuf, cap: u64, threshold: usize) -> Self {
        Self {
            path,
            cap,
            state: SpillState::Pending { buffered: Vec::new(), threshold },
            write_through: false,
        }
    }

    /// Created as soon as anything is written (at once with [`SpillFile::open_now`]); every
    /// write reaches the file at once.
    pub(crate) fn eager(path: PathBuf, cap: u64) -> Self {
        Self { write_through: true, ..Self::lazy(path, cap, 0) }
    }

    /// Creates the file now, if it is not created yet.
    pub(crate) async fn open_now(&mut self) {
        if let SpillState::Pending { buffered, .. } = &mut self.state {
            let buffered = std::mem::take(buffered);
            self.open(buffered).await;
        }
    }

    async fn open(&mut self, buffered: Vec<u8>) {
        self.state = match create_private(&self.path).await {
            Ok(file) => SpillState::Open {
                file: tokio::io::BufWriter::with_capacity(WRITE_BUFFER, file),
                written: 0,
            },
            Err(error) => {
                tracing::warn!(path = %self.path.display(), %error, "cannot create spill file");
                SpillState::Failed
            }
        };
        self.write_open(&buffered).await;
    }

    pub(crate) async fn write(&mut self, bytes: &[u8]) {
        if let SpillState::Pending { buffered, threshold } = &mut self.state {
            buffered.extend_from_slice(bytes);
            if buffered.len() > *threshold {
                let buffered = std::mem::take(buffered);
                self.open(buffered).await;
            }
            return;
        }
        self.write_open(bytes).await;
    }

    async fn write_open(&mut self, bytes: &[u8]) {
        let SpillState::Open { file, written } = &mut self.state else {
            return;
        };
        let room = self.cap.saturating_sub(*written);
        let take = (bytes.len() as u64).min(room) as usize;
        if take == 0 {
            return;
        }
        let mut written_out = file.write_all(&bytes[..take]).await;
        if self.write_through && written_out.is_ok() {
            written_out = file.flush().await;
        }
        if let Err(error) = written_out {
            tracing::warn!(path = %self.path.display(), %error, "cannot write spill file");
            self.state = SpillState::Failed;
            return;
        }
        *written += take as u64;
    }

    /// The summary, or `None` when no file was needed or it could not be written. The file is
    /// flushed and closed.
    pub(crate) async fn finish(self) -> Option<SpillSummary> {
        match self.state {
            SpillState::Open { mut file, written } => {
                if let Err(error) = file.flush().await {
                    tracing::warn!(path = %self.path.display(), %error, "cannot write spill file");
                }
                Some(SpillSummary { path: self.path, bytes: written })
            }
            SpillState::Pending { .. } | SpillState::Failed => None,
        }
    }
}

/// Creates a new file readable by this user only, in a directory only this user can enter;
/// never through an existing name or a symbolic link on any component of its path.
async fn create_private(path: &Path) -> std::io::Result<File> {
    let path = path.to_owned();
    let file = tokio::task::spawn_blocking(move || crate::nofollow::create_private_file(&path))
        .await
        .map_err(std::io::Error::other)??;
    Ok(File::from_std(file))
}

/// Splits the model budget between the two streams: the smaller one gets what it needs, up to
/// half, and the larger one the rest.
fn share_budget(stdout: usize, stderr: usize, budget: usize) -> (usize, usize) {
    if stdout + stderr <= budget {
        return (stdout, stderr);
    }
    let half = budget / 2;
    if stdout <= stderr {
        let out = stdout.min(half);
        (out, budget - out)
    } else {
        let err = stderr.min(half);
        (budget - err, err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(model_budget: usize) -> CaptureLimits {
        CaptureLimits { model_budget, spill_cap: 1 << 20 }
    }

    fn scratch(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("hotsh-capture-test-{}-{name}", std::process::id()))
    }

    fn block_on<T>(future: impl std::future::Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread().build().expect("a runtime").block_on(future)
    }

    #[test]
    fn small_output_is_kept_whole_without_spill() {
        let mut capture = OutputCapture::new(limits(100), scratch("small"));
        block_on(capture.push(Stream::Stdout, b"hello\n"));
        block_on(capture.push(Stream::Stderr, b"oops\n"));
        let out = block_on(capture.finish());
        assert_eq!(out.stdout, "hello\n");
        assert_eq!(out.stderr, "oops\n");
        assert!(!out.truncated);
        assert_eq!(out.spill, None);
    }

    #[test]
    fn long_output_keeps_head_and_tail_and_spills_everything() {
        let path = scratch("long");
        let mut capture = OutputCapture::new(limits(20), path.clone());
        let mut all = Vec::new();
        for i in 0..100u32 {
            let line = format!("{i:03}\n");
            all.extend_from_slice(line.as_bytes());
            block_on(capture.push(Stream::Stdout, line.as_bytes()));
        }
        let out = block_on(capture.finish());
        assert!(out.truncated);
        assert!(out.stdout.starts_with("000\n001\n"), "{}", out.stdout);
        assert!(out.stdout.ends_with("098\n099\n"), "{}", out.stdout);
        assert!(out.stdout.contains("[… 380 bytes omitted …]"), "{}", out.stdout);
        assert_eq!(out.spill, Some(SpillSummary { path: path.clone(), bytes: all.len() as u64 }));
        assert_eq!(std::fs::read(&path).expect("spill file exists"), all);
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn spill_file_stops_at_its_cap() {
        let path = scratch("cap");
        let mut capture =
            OutputCapture::new(CaptureLimits { model_budget: 4, spill_cap: 10 }, path.clone());
        for _ in 0..10 {
            block_on(capture.push(Stream::Stdout, b"abcd"));
        }
        let out = block_on(capture.finish());
        assert_eq!(out.total_bytes, 40);
        assert_eq!(out.spill.map(|s| s.bytes), Some(10));
        assert_eq!(std::fs::read(&path).expect("spill file exists").len(), 10);
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn budget_favours_the_larger_stream() {
        assert_eq!(share_budget(10, 5, 100), (10, 5));
        assert_eq!(share_budget(1000, 5, 100), (95, 5));
        assert_eq!(share_budget(1000, 1000, 100), (50, 50));
        assert_eq!(share_budget(3, 1000, 100), (3, 97));
    }
}
