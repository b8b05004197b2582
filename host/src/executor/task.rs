//! Background tasks: their output between reads, their status, their owner.

use crate::sync::lock;
use hotsh_core::executor::{TaskId, TaskRead, TaskStatus, complete_utf8_prefix};
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Mutex;
use tokio::sync::watch;

/// How a task was confined, as the host asked (kept to judge its end).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Confinement {
    pub(crate) policy: Option<crate::sandbox::Policy>,
    pub(crate) mode: String,
    pub(crate) workdir: PathBuf,
}

/// Bytes of a task's latest output kept whatever was read.
const TAIL: usize = 4 << 10;

/// Unread output, bounded: older unread bytes give way to newer ones and are counted.
#[derive(Debug)]
struct Unread {
    bytes: VecDeque<u8>,
    dropped: u64,
    /// An incomplete UTF-8 sequence held back from the previous read.
    carry: Vec<u8>,
}

/// One background task.
#[derive(Debug)]
pub(crate) struct Task {
    pub(crate) id: TaskId,
    pub(crate) owner: Option<String>,
    pub(crate) command: String,
    /// The task's shim, for stopping it.
    pub(crate) process: super::ProcessHandle,
    unread_cap: usize,
    unread: Mutex<Unread>,
    /// The file its whole output goes to (written by the task's pump, not here).
    output_path: PathBuf,
    status: watch::Sender<TaskStatus>,
    /// The host asked for the task to be killed.
    pub(crate) kill_requested: std::sync::atomic::AtomicBool,
    /// Its shim reported that it never started.
    pub(crate) not_run: std::sync::atomic::AtomicBool,
    pub(crate) confinement: Confinement,
    /// Its latest output, read or not.
    tail: Mutex<VecDeque<u8>>,
    /// A tool's answer already told the model how the task ended (a kill, a read after the
    /// end): no notice is needed.
    pub(crate) end_reported: std::sync::atomic::AtomicBool,
}

impl Task {
    pub(crate) fn new(
        id: TaskId,
        owner: Option<String>,
        command: String,
        process: super::ProcessHandle,
        unread_cap: usize,
        output_path: PathBuf,
        confinement: Confinement,
    ) -> Self {
        Self {
            id,
            owner,
            command,
            process,
            unread_cap,
            unread: Mutex::new(Unread { bytes: VecDeque::new(), dropped: 0, carry: Vec::new() }),
            output_path,
            status: watch::Sender::new(TaskStatus::RUNNING),
            kill_requested: std::sync::atomic::AtomicBool::new(false),
            not_run: std::sync::atomic::AtomicBool::new(false),
            confinement,
            tail: Mutex::new(VecDeque::with_capacity(TAIL)),
            end_reported: std::sync::atomic::AtomicBool::new(false),
        }
    }

    pub(crate) fn output_path(&self) -> &PathBuf {
        &self.output_path
    }

    /// Keeps `bytes` for the next read (bounded).
    pub(crate) fn push(&self, bytes: &[u8]) {
        {
            let mut tail = lock(&self.tail);
            tail.extend(&bytes[bytes.len().saturating_sub(TAIL)..]);
            let excess = tail.len().saturating_sub(TAIL);
            tail.drain(..excess);
        }
        let mut unread = lock(&self.unread);
        unread.bytes.extend(bytes);
        if unread.bytes.len() > self.unread_cap {
            let excess = unread.bytes.len() - self.unread_cap;
            unread.bytes.drain(..excess);
            unread.dropped += excess as u64;
        }
    }

    /// Its latest output (at most [`TAIL`] bytes, lossy UTF-8).
    pub(crate) fn tail(&self) -> String {
        let tail = lock(&self.tail);
        let (front, back) = tail.as_slices();
        String::from_utf8_lossy(&[front, back].concat()).into_owned()
    }

    pub(crate) fn status(&self) -> TaskStatus {
        self.status.borrow().clone()
    }

    pub(crate) fn finish(&self, status: TaskStatus) {
        self.status.send_replace(status);
    }

    /// Waits until the task has ended.
    pub(crate) async fn ended(&self) -> TaskStatus {
        let mut status = self.status.subscribe();
        match status.wait_for(|s| !s.is_running()).await {
            Ok(status) => status.clone(),
            Err(_) => self.status(),
        }
    }

    /// Takes the output produced since the previous read. Reading and the status are taken
    /// together, so a read that reports an ended task has all of its output.
    pub(crate) fn read(&self) -> TaskRead {
        let status = self.status();
        let mut unread = lock(&self.unread);
        let mut bytes = std::mem::take(&mut unread.carry);
        if unread.dropped > 0 {
            bytes.clear();
        }
        bytes.extend(unread.bytes.drain(..));
        let keep_from =
            if status.is_running() { complete_utf8_prefix(&bytes) } else { bytes.len() };
        unread.carry = bytes.split_off(keep_from);
        let dropped = std::mem::take(&mut unread.dropped);
        TaskRead {
            text: String::from_utf8_lossy(&bytes).into_owned(),
            dropped_bytes: dropped,
            output_path: self.output_path.clone(),
            status,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(cap: usize) -> Task {
        let process = crate::executor::ProcessHandle::detached();
        let confinement =
            Confinement { policy: None, mode: "danger-full-access".into(), workdir: "/".into() };
        Task::new(
            TaskId("bash-1".into()),
            None,
            "x".into(),
            process,
            cap,
            "/nowhere".into(),
            confinement,
        )
    }

    #[test]
    fn the_tail_keeps_the_latest_output_whatever_was_read() {
        let task = task(8);
        task.push(&vec![b'a'; TAIL]);
        let _ = task.read();
        task.push(b"last words");
        let tail = task.tail();
        assert_eq!(tail.len(), TAIL);
        assert!(tail.ends_with("last words"), "{tail}");
    }

    #[test]
    fn reads_deliver_each_byte_once() {
        let task = task(100);
        task.push(b"one\n");
        assert_eq!(task.read().text, "one\n");
        assert_eq!(task.read().text, "");
        task.push(b"two\n");
        assert_eq!(task.read().text, "two\n");
    }

    #[test]
    fn overflow_is_counted() {
        let task = task(4);
        task.push(b"abcdefgh");
        let read = task.read();
        assert_eq!(read.text, "efgh");
        assert_eq!(read.dropped_bytes, 4);
        assert_eq!(task.read().dropped_bytes, 0);
    }
}
