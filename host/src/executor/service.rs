//! Long-lived programs the host talks to over pipes (MCP servers). Each starts under a shim
//! like any command, so it has the same guarantees: its own process group, the environment
//! of commands (secrets scrubbed) with the variables its client gave on top, and death with
//! the host however the host dies (the shim's lifeline). The shell runs `exec` on the
//! program with its arguments passed as positional parameters, never quoted into a string.

use super::process::ProcessHandle;
use super::{Executor, Output, RunError, exit_of, kill_shim, stop_shim};
use crate::sync::lock;
use std::collections::VecDeque;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt as _};
use tokio::net::unix::pipe;
use tokio::sync::watch;

/// How much of a service's stderr is kept (its last bytes, for the message when it fails).
const STDERR_TAIL: usize = 4 << 10;

/// A program to start and talk to.
#[derive(Debug, Clone)]
pub(crate) struct ServiceRequest {
    pub(crate) program: PathBuf,
    pub(crate) args: Vec<String>,
    /// Set on top of the commands' environment.
    pub(crate) env: Vec<(String, String)>,
    pub(crate) workdir: PathBuf,
}

/// A started service: its pipes and its control.
pub(crate) struct Service {
    pub(crate) stdin: pipe::Sender,
    pub(crate) stdout: Box<dyn AsyncRead + Unpin + Send>,
    pub(crate) control: ServiceControl,
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service").field("control", &self.control).finish_non_exhaustive()
    }
}

/// How a service ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ServiceEnd {
    pub(crate) exit_code: Option<i32>,
    pub(crate) signal: Option<String>,
}

impl std::fmt::Display for ServiceEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.exit_code, &self.signal) {
            (Some(code), _) => write!(f, "exit code {code}"),
            (None, Some(signal)) => write!(f, "killed by {signal}"),
            (None, None) => f.write_str("ended"),
        }
    }
}

/// Stops a service and tells how it ended. Cloning shares the service.
#[derive(Debug, Clone)]
pub(crate) struct ServiceControl {
    process: Arc<ProcessHandle>,
    ended: watch::Receiver<Option<ServiceEnd>>,
    stderr: Arc<Mutex<VecDeque<u8>>>,
    grace: Duration,
}

impl ServiceControl {
    /// Asks the shim to stop the service (TERM, then KILL after the grace period), and kills
    /// the shim itself if it has not ended well after that. Returns at once.
    pub(crate) fn stop(&self) {
        if self.ended.borrow().is_some() {
            return;
        }
        let last_resort = stop_shim(&self.process, self.grace);
        let (process, mut ended) = (Arc::clone(&self.process), self.ended.clone());
        tokio::spawn(async move {
            if tokio::time::timeout_at(last_resort, ended.wait_for(Option::is_some)).await.is_err()
            {
                kill_shim(&process);
            }
        });
    }

    /// Waits for the service to end.
    pub(crate) async fn ended(&self) -> ServiceEnd {
        let mut ended = self.ended.clone();
        let end = match ended.wait_for(Option::is_some).await {
            Ok(end) => end.clone(),
            Err(_) => None,
        };
        end.unwrap_or(ServiceEnd { exit_code: None, signal: None })
    }

    /// The last of what the service wrote to stderr (lossy UTF-8, trimmed).
    pub(crate) fn stderr_tail(&self) -> String {
        let tail = lock(&self.stderr);
        let (front, back) = tail.as_slices();
        let bytes = [front, back].concat();
        String::from_utf8_lossy(&bytes).trim().to_owned()
    }
}

impl Executor {
    /// Starts a service and returns its pipes at once. Must run in the runtime's context.
    pub(crate) fn start_service(&self, request: &ServiceRequest) -> Result<Service, RunError> {
        let positional: Vec<OsString> = std::iter::once(request.program.clone().into_os_string())
            .chain(request.args.iter().map(OsString::from))
            .collect();
        let super::Spawned { mut exit, process: handle, pipes, stdin } = self.spawn_shim(
            r#"exec -- "$0" "$@""#,
            &positional,
            &request.env,
            &request.workdir,
            super::Confinement::default(),
            Output::Service,
        )?;
        let (Some(stdin), Some(stdout)) = (stdin, pipes.first) else {
            kill_shim(&handle);
            return Err(RunError::Spawn(std::io::Error::other("the service's pipes are missing")));
        };
        let process = Arc::new(handle);
        let stderr = Arc::new(Mutex::new(VecDeque::with_capacity(STDERR_TAIL)));
        let (report, ended) = watch::channel(None);
        let (tail, reaped) = (Arc::clone(&stderr), Arc::clone(&process));
        let mut stderr_pipe = pipes.second;
        tokio::spawn(async move {
            let keep = async {
                let Some(pipe) = stderr_pipe.as_mut() else { return };
                let mut buf = [0u8; 4096];
                while let Ok(n @ 1..) = pipe.read(&mut buf).await {
                    let mut tail = lock(&tail);
                    tail.extend(&buf[..n]);
                    let excess = tail.len().saturating_sub(STDERR_TAIL);
                    tail.drain(..excess);
                }
            };
            let (status, ()) = tokio::join!(exit.wait(), keep);
            let end = match status {
                Ok(status) => {
                    let (exit_code, signal) = exit_of(status.status);
                    ServiceEnd { exit_code, signal }
                }
                Err(error) => {
                    tracing::warn!(%error, "cannot wait for a service; killing it");
                    kill_shim(&reaped);
                    ServiceEnd { exit_code: None, signal: None }
                }
            };
            let _ = report.send(Some(end));
        });
        Ok(Service {
            stdin,
            stdout,
            control: ServiceControl { process, ended, stderr, grace: self.config.kill_grace },
        })
    }
}
