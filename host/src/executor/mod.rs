//! The bash executor: the only module that spawns processes (ARCHITECTURE.md, invariant 2).
//!
//! A command runs as `bash -c <command>` in a process group of its own, with stdin from
//! `/dev/null` and an environment scrubbed of the host's secrets. Its output goes three ways:
//! a bounded head and tail per stream for the model, the full merged stream to a bounded spill
//! file, and a bounded live buffer that a forwarder streams to the client. Stopping a command
//! (timeout, cancel) signals the whole group: SIGTERM, then SIGKILL after a grace period.
//! When the command's shell exits, whatever it left running in its group is killed too.

mod capture;
mod env;
mod live;

pub(crate) use capture::CaptureLimits;
pub(crate) use env::EnvPolicy;
pub(crate) use live::{Drained, LiveOutput};

use capture::{OutputCapture, Stream};
use rustix::process::{Pid, Signal, kill_process_group};
use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::{ChildStderr, ChildStdout, Command};
use tokio_util::sync::CancellationToken;

/// Executor settings; the defaults are the documented contract.
#[derive(Debug, Clone)]
pub(crate) struct ExecutorConfig {
    pub(crate) shell: PathBuf,
    pub(crate) default_timeout: Duration,
    pub(crate) max_timeout: Duration,
    /// Between SIGTERM to a group and SIGKILL.
    pub(crate) kill_grace: Duration,
    /// How long to keep reading after the shell exited and its group was killed (a process
    /// that left the group may still hold the pipes).
    pub(crate) drain_grace: Duration,
    pub(crate) capture: CaptureLimits,
    /// Bytes of live output that may wait for the client between two forwards.
    pub(crate) live_cap: usize,
}

impl Default for ExecutorConfig {
    fn default() -> Self {
        Self {
            shell: PathBuf::from("bash"),
            default_timeout: Duration::from_secs(120),
            max_timeout: Duration::from_secs(600),
            kill_grace: Duration::from_secs(2),
            drain_grace: Duration::from_millis(250),
            capture: CaptureLimits {
                model_budget: 30_000,
                spill_cap: 256 << 20,
            },
            live_cap: 256 << 10,
        }
    }
}

/// A foreground command.
#[derive(Debug, Clone)]
pub(crate) struct RunRequest {
    pub(crate) command: String,
    pub(crate) workdir: PathBuf,
    pub(crate) timeout: Option<Duration>,
    /// Where the full output goes if it does not fit the model's view.
    pub(crate) spill_path: PathBuf,
}

/// How a command ended. Non-zero exits, timeouts and aborts are outcomes, not errors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RunOutcome {
    pub(crate) exit_code: Option<i32>,
    pub(crate) signal: Option<String>,
    pub(crate) timed_out: bool,
    pub(crate) timeout: Duration,
    pub(crate) aborted: bool,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
    pub(crate) truncated: bool,
    pub(crate) spill_path: Option<PathBuf>,
    pub(crate) duration: Duration,
}

/// Infrastructure failures: the command did not run.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RunError {
    #[error("working directory {0} does not exist or is not a directory")]
    BadWorkdir(PathBuf),
    #[error("cannot start {shell}: {source}")]
    Spawn {
        shell: String,
        source: std::io::Error,
    },
}

/// The host's bash executor.
#[derive(Debug)]
pub(crate) struct Executor {
    config: ExecutorConfig,
    /// The environment every command gets, computed once from the host's.
    env: Vec<(OsString, OsString)>,
}

impl Executor {
    pub(crate) fn new(config: ExecutorConfig, env_policy: &EnvPolicy) -> Self {
        let env = env_policy.scrub(std::env::vars_os());
        Self { config, env }
    }

    pub(crate) fn config(&self) -> &ExecutorConfig {
        &self.config
    }

    /// Runs a command to its end (or until it is stopped), streaming output into `live`. The
    /// caller closes `live` when the call it belongs to is over (a call may run several
    /// commands into one card).
    pub(crate) async fn run(
        &self,
        request: RunRequest,
        live: &LiveOutput,
        cancel: &CancellationToken,
    ) -> Result<RunOutcome, RunError> {
        if !request.workdir.is_dir() {
            return Err(RunError::BadWorkdir(request.workdir));
        }
        let timeout = request
            .timeout
            .unwrap_or(self.config.default_timeout)
            .min(self.config.max_timeout);
        let started_at = Instant::now();

        let mut command = Command::new(&self.config.shell);
        command
            .arg("-c")
            .arg(&request.command)
            .current_dir(&request.workdir)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        #[expect(
            clippy::disallowed_methods,
            reason = "the executor is where processes start"
        )]
        let mut child = command.spawn().map_err(|source| RunError::Spawn {
            shell: self.config.shell.display().to_string(),
            source,
        })?;
        let group = child.id().and_then(|id| Pid::from_raw(id as i32));
        let mut capture = OutputCapture::new(self.config.capture, request.spill_path);

        // The pump borrows the capture; the block ends both borrows before `finish`.
        let (status, timed_out, aborted) = {
            let pump = pump_output(child.stdout.take(), child.stderr.take(), &mut capture, live);
            tokio::pin!(pump);
            let mut pump_done = false;
            let deadline = tokio::time::sleep(timeout);
            tokio::pin!(deadline);
            let mut timed_out = false;
            let mut aborted = false;
            let mut kill_at: Option<tokio::time::Instant> = None;

            let status = loop {
                tokio::select! {
                    status = child.wait() => break status,
                    () = &mut pump, if !pump_done => pump_done = true,
                    () = &mut deadline, if !timed_out && !aborted => {
                        timed_out = true;
                        signal_group(group, Signal::TERM);
                        kill_at = Some(tokio::time::Instant::now() + self.config.kill_grace);
                    }
                    () = cancel.cancelled(), if !timed_out && !aborted => {
                        aborted = true;
                        signal_group(group, Signal::TERM);
                        kill_at = Some(tokio::time::Instant::now() + self.config.kill_grace);
                    }
                    () = sleep_until_opt(kill_at) => {
                        signal_group(group, Signal::KILL);
                        kill_at = None;
                    }
                }
            };
            // Whatever the shell left behind in its group goes with it.
            signal_group(group, Signal::KILL);
            if !pump_done {
                let _ = tokio::time::timeout(self.config.drain_grace, &mut pump).await;
            }
            (status, timed_out, aborted)
        };

        let captured = capture.finish();
        let (exit_code, signal) = match status {
            Ok(status) => (status.code(), status.signal().map(signal_name)),
            Err(error) => {
                tracing::warn!(%error, "cannot wait for command");
                (None, None)
            }
        };
        Ok(RunOutcome {
            exit_code,
            signal,
            timed_out,
            timeout,
            aborted,
            stdout: captured.stdout,
            stderr: captured.stderr,
            truncated: captured.truncated,
            spill_path: captured.spill_path,
            duration: started_at.elapsed(),
        })
    }
}

/// Reads both pipes until both are closed, feeding the capture and the live buffer.
async fn pump_output(
    mut stdout: Option<ChildStdout>,
    mut stderr: Option<ChildStderr>,
    capture: &mut OutputCapture,
    live: &LiveOutput,
) {
    let mut out_buf = vec![0u8; 64 << 10];
    let mut err_buf = vec![0u8; 64 << 10];
    while stdout.is_some() || stderr.is_some() {
        tokio::select! {
            read = read_some(&mut stdout, &mut out_buf) => match read {
                Some(n) => {
                    capture.push(Stream::Stdout, &out_buf[..n]);
                    live.push(&out_buf[..n]);
                }
                None => stdout = None,
            },
            read = read_some(&mut stderr, &mut err_buf) => match read {
                Some(n) => {
                    capture.push(Stream::Stderr, &err_buf[..n]);
                    live.push(&err_buf[..n]);
                }
                None => stderr = None,
            },
        }
    }
}

/// One read from a pipe that may already be closed; `None` at end of stream or on error.
async fn read_some<R: AsyncRead + Unpin>(pipe: &mut Option<R>, buf: &mut [u8]) -> Option<usize> {
    match pipe {
        Some(reader) => match reader.read(buf).await {
            Ok(0) | Err(_) => None,
            Ok(n) => Some(n),
        },
        None => std::future::pending().await,
    }
}

async fn sleep_until_opt(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn signal_group(group: Option<Pid>, signal: Signal) {
    if let Some(group) = group {
        // ESRCH (the group is already gone) is the common, harmless case.
        let _ = kill_process_group(group, signal);
    }
}

/// The conventional name of a signal number, e.g. `SIGKILL`.
pub(crate) fn signal_name(signal: i32) -> String {
    let name = match signal {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        5 => "SIGTRAP",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        10 => "SIGUSR1",
        11 => "SIGSEGV",
        12 => "SIGUSR2",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        24 => "SIGXCPU",
        25 => "SIGXFSZ",
        31 => "SIGSYS",
        other => return format!("signal {other}"),
    };
    name.to_owned()
}
