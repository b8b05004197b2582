//! The executor port: where commands run. A request is portable data (the command, its
//! folder, its limits, and the sandbox policy as paths and a network switch, never a
//! backend's flags); the host's executor (`host/src/executor`) serves it with shims on this
//! machine, and a remote executor would serve the same requests elsewhere.
//!
//! Foreground commands (`run`) resolve when they end; non-zero exits, timeouts and aborts are
//! outcomes, and only a command that could not be started is an error. Background tasks
//! (`start`) return at once with an id named after the tool that started them (`bash-3`);
//! their output is read incrementally, they are killed by id, and each one's end is reported
//! exactly once ([`TaskEnded`], through the stream the executor hands its owner).

mod live;

pub use live::{Drained, LiveOutput, complete_utf8_prefix};

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// What a confined command may do, as data: the folders it may write (and what stays
/// read-only beneath them), the sockets it may reach, the network. The executor enforces it
/// with whatever backend it has.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Policy {
    /// Directories (canonical) where commands may write.
    pub writable: Vec<PathBuf>,
    /// Directories inside the writable roots kept in place (still writable), so that the
    /// read-only paths beneath them cannot be renamed away.
    pub pinned: Vec<PathBuf>,
    /// Paths inside the writable roots that stay read-only (`.git`, hotsh's own files).
    pub read_only: Vec<PathBuf>,
    /// With the network off, the directories beneath which a command may connect to a Unix
    /// socket.
    pub sockets: Vec<PathBuf>,
    pub network: bool,
    /// Directories (canonical) a command sees empty and read-only: the model key hotsh
    /// keeps.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hidden: Vec<PathBuf>,
}

/// A foreground command.
#[derive(Debug, Clone)]
pub struct RunRequest {
    pub command: String,
    pub workdir: PathBuf,
    pub timeout: Option<Duration>,
    /// Where the full output goes if it does not fit the model's view.
    pub spill_path: PathBuf,
    /// The confinement; `None` runs unconfined.
    pub policy: Option<Policy>,
    /// The session whose sandbox environment the command may share; `None`: a sandbox of its
    /// own (a call under an escalation granted for it alone).
    pub environment: Option<String>,
    /// The command's `$TMPDIR` (the session's private temp dir), if not the executor's.
    pub temp_dir: Option<PathBuf>,
    /// What the command reads on stdin (`None`: `/dev/null`); a command that does not read it
    /// all is not waited for.
    pub stdin: Option<Vec<u8>>,
    /// Variables set on top of the commands' environment (after the credential scrub).
    pub env: Vec<(String, String)>,
}

/// A full copy of a command's output, kept when the model's view of it is cut.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpillSummary {
    pub path: PathBuf,
    pub bytes: u64,
}

/// How a foreground command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOutcome {
    pub exit_code: Option<i32>,
    pub signal: Option<String>,
    /// The command never started (the reason is in its stderr).
    pub not_run: bool,
    pub timed_out: bool,
    pub timeout: Duration,
    pub aborted: bool,
    pub stdout: String,
    pub stderr: String,
    pub truncated: bool,
    pub spill: Option<SpillSummary>,
    pub total_bytes: u64,
    pub duration: Duration,
}

/// A background command.
#[derive(Debug, Clone)]
pub struct StartRequest {
    pub command: String,
    pub workdir: PathBuf,
    /// Opaque token recorded with the task (the session id); never interpreted.
    pub owner: Option<String>,
    /// Directory for the task's output file (`<task id>.log`).
    pub output_dir: PathBuf,
    /// The confinement; `None` runs unconfined.
    pub policy: Option<Policy>,
    /// The sandbox mode's name, reported with the task's end (never interpreted).
    pub mode: String,
    /// As [`RunRequest::environment`].
    pub environment: Option<String>,
    /// As [`RunRequest::temp_dir`].
    pub temp_dir: Option<PathBuf>,
    /// What started it (the tool's name): its id is `<kind>-N`.
    pub kind: String,
}

/// A background task's id (`bash-3`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskId(pub String);

impl std::fmt::Display for TaskId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A background task that was just started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Started {
    pub id: TaskId,
    pub output_path: PathBuf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskState {
    Running,
    Exited,
    Killed,
}

impl TaskState {
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Running => "running",
            TaskState::Exited => "exited",
            TaskState::Killed => "killed",
        }
    }
}

/// A task's state, with how it ended once it has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskStatus {
    pub state: TaskState,
    pub exit_code: Option<i32>,
    pub signal: Option<String>,
}

impl TaskStatus {
    pub const RUNNING: Self = Self { state: TaskState::Running, exit_code: None, signal: None };

    pub fn is_running(&self) -> bool {
        self.state == TaskState::Running
    }
}

/// Output a task produced since the previous read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskRead {
    pub text: String,
    pub dropped_bytes: u64,
    pub output_path: PathBuf,
    pub status: TaskStatus,
}

/// What a kill did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Killed {
    /// False when the task had already ended.
    pub killed: bool,
    pub status: TaskStatus,
}

/// A running task of an owner, as [`Executor::running_owned_by`] lists it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct RunningTask {
    pub id: String,
    pub command: String,
    /// The sandbox mode it started under.
    pub mode: String,
}

/// How a task ended, as its owner is told (once).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskEnded {
    pub id: TaskId,
    pub owner: Option<String>,
    pub command: String,
    pub status: TaskStatus,
    pub output_path: PathBuf,
    /// The sandbox mode it ran under.
    pub mode: String,
    /// `file`, `network` or `syscall` when its end looks like the sandbox's refusal (judged
    /// by the executor from its policy and the end of its output).
    pub denied: Option<String>,
    /// It never started (the reason is at the end of its output).
    pub not_run: bool,
}

/// The command did not run: the executor could not start it or refused it.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("working directory {0} does not exist or is not a directory")]
    BadWorkdir(PathBuf),
    #[error("cannot start a command: {0}")]
    Spawn(std::io::Error),
    #[error(
        "too many background tasks ({running} running; the limit is {limit}); stop one or wait for one to finish"
    )]
    TooManyTasks { running: usize, limit: usize },
    #[error("the executor is shutting down")]
    Disposed,
    #[error("cannot wait for the command: {0}")]
    Wait(std::io::Error),
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TaskError {
    #[error("unknown task id {0}")]
    Unknown(String),
}

/// Held while nothing confined may start (see [`Executor::pause_confined`]).
pub type Pause = Box<dyn Send + Sync>;

/// Where commands run: the port the host's executor implements.
pub trait Executor: Send + Sync + std::fmt::Debug {
    /// Runs a command to its end (or until `cancel`), streaming its output into `live`.
    fn run<'a>(
        &'a self,
        request: RunRequest,
        live: &'a LiveOutput,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<RunOutcome, RunError>>;

    /// Starts a background task and returns at once.
    fn start(&self, request: StartRequest) -> BoxFuture<'_, Result<Started, RunError>>;

    /// The output of a task produced since the previous read.
    fn read_output(&self, id: &str) -> Result<TaskRead, TaskError>;

    /// Kills a task (its whole process tree) and waits for it to end.
    fn kill<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Killed, TaskError>>;

    /// The owner token recorded when the task started.
    fn owner_of(&self, id: &str) -> Result<Option<String>, TaskError>;

    /// A tool's answer told the model that task `id` ended: its end needs no notice.
    fn mark_end_reported(&self, id: &str);

    /// Whether the model already learnt from a tool's answer that task `id` ended.
    fn end_reported(&self, id: &str) -> bool;

    /// The running tasks of `owner`, sorted by id.
    fn running_owned_by(&self, owner: &str) -> Vec<RunningTask>;

    /// Kills every running task of `owner` (a session that closes) and waits for them; what
    /// it kept for `owner` (a sandbox environment) is let go.
    fn kill_owned_by<'a>(&'a self, owner: &'a str) -> BoxFuture<'a, ()>;

    /// Gets ready to run `owner`'s commands under `policy` (a session that opens or changes
    /// mode), so that its first command does not wait. Blocking.
    fn prepare(&self, owner: &str, policy: &Policy);

    /// Waits until no confined command runs and none can start, and keeps it so while the
    /// returned pause is held; `None` when one is running now. (A write by path that follows
    /// links, as a client's is, must not meet a link a confined command swaps in.)
    fn pause_confined(&self) -> BoxFuture<'_, Option<Pause>>;
}
