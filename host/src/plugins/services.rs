//! The host services one plugin call receives (the ABI's `HostServices`).
//!
//! The object is bound to one call: commands it runs stream into that call's card and stop
//! when the turn is cancelled. Plugin calls run on a blocking thread; each service runs its
//! work there, in the host's runtime (`Handle::block_on`: the runtime's workers drive its IO
//! and timers), and waits for the answer. That thread spawns no process: commands are forked
//! by the executor's supervisor (DESIGN §6 keeps spawns off blocking-pool threads because a
//! child's `PR_SET_PDEATHSIG` fires when the thread that spawned it ends).

use super::gate::{Action, CallSandbox, Gate};
use crate::executor::{
    Killed, LiveOutput, RunOutcome, RunRequest, StartRequest, TaskRead, TaskState, TaskStatus,
};
use crate::sync::lock;
use hotsh_abi::v1 as abi;
use hotsh_abi::{ROption, RResult, RStr, RString};
use hotsh_core::executor::Executor;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

#[derive(Debug)]
pub(crate) struct CallServices {
    pub(crate) runtime: tokio::runtime::Handle,
    pub(crate) executor: Arc<dyn Executor>,
    pub(crate) cancel: CancellationToken,
    pub(crate) live: Arc<LiveOutput>,
    /// Spill files of this call are `<spill_stem>-<n>.log`.
    pub(crate) spill_stem: PathBuf,
    pub(crate) plugin: String,
    /// The tool called (it names the background tasks the call starts).
    pub(crate) tool: String,
    pub(crate) runs: AtomicU32,
    /// The calling session: the owner of the tasks this call starts.
    pub(crate) session_id: String,
    /// Where background tasks of this session write their output.
    pub(crate) task_output_dir: PathBuf,
    /// Background tasks started during this call, in order.
    pub(crate) started: std::sync::Mutex<Vec<StartedTask>>,
    /// Why the last command this call ran ended, when it did not simply exit 0.
    pub(crate) last_end: std::sync::Mutex<Option<String>>,
    /// How this call's commands are confined.
    pub(crate) sandbox: CallSandbox,
}

/// A background task a call started.
#[derive(Debug, Clone)]
pub(crate) struct StartedTask {
    pub(crate) task_id: String,
    pub(crate) command: String,
    pub(crate) output_path: PathBuf,
}

impl CallServices {
    /// Runs `future` in the host's runtime on this (blocking) thread and waits for it: no
    /// hop to a worker and back. A panic in it is caught by the service's guard.
    pub(super) fn on_runtime<T: Send + 'static>(
        &self,
        future: impl std::future::Future<Output = T> + Send + 'static,
    ) -> Result<T, RString> {
        Ok(self.runtime.block_on(future))
    }
}

/// The services as plugins call them: each runs inside `catch_unwind`, so a panic in the
/// host's own code (which would otherwise unwind into the plugin's frames and abort the
/// process) comes back to the plugin as an error.
impl abi::HostServices for CallServices {
    fn run(&self, spec: abi::CommandSpec) -> RResult<abi::CommandOutcome, RString> {
        guarded("run", || self.run_command(spec))
    }

    fn log(&self, level: abi::LogLevel, message: RStr<'_>) {
        let _ = guarded("log", || {
            self.write_log(level, message);
            RResult::ROk(())
        });
    }

    fn start(&self, spec: abi::CommandSpec) -> RResult<abi::TaskStarted, RString> {
        guarded("start", || self.start_task(spec))
    }

    fn read_output(&self, task_id: RStr<'_>) -> RResult<abi::TaskOutput, RString> {
        guarded("read_output", || self.read_task_output(task_id))
    }

    fn kill(&self, task_id: RStr<'_>) -> RResult<abi::KillOutcome, RString> {
        guarded("kill", || self.kill_task(task_id))
    }

    fn owner_of(&self, task_id: RStr<'_>) -> RResult<ROption<RString>, RString> {
        guarded("owner_of", || self.task_owner(task_id))
    }

    fn read_text_file(&self, read: abi::FileRead) -> RResult<abi::FileText, RString> {
        guarded("read_text_file", || self.read_file(read).map_err(RString::from).into())
    }

    fn write_text_file(&self, write: abi::FileWrite) -> RResult<abi::FileWritten, RString> {
        guarded("write_text_file", || self.write_file(write).map_err(RString::from).into())
    }
}

/// Runs one host service, turning a panic into an error value.
fn guarded<T>(service: &str, body: impl FnOnce() -> RResult<T, RString>) -> RResult<T, RString> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
        Ok(result) => result,
        Err(payload) => {
            let reason = crate::sync::panic_reason(payload.as_ref());
            tracing::error!(service, %reason, "a host service panicked");
            RResult::RErr(format!("the host failed in `{service}`: {reason}").into())
        }
    }
}

impl CallServices {
    /// The sandbox decision for `spec` (asking the user when it wants a wider mode).
    fn gate(&self, spec: &abi::CommandSpec) -> Result<Gate, RString> {
        let (sandbox, action, cancel) =
            (self.sandbox.clone(), Action::command(spec), self.cancel.clone());
        self.on_runtime(async move { sandbox.gate(&action, &cancel).await })?.map_err(RString::from)
    }

    fn run_command(&self, spec: abi::CommandSpec) -> RResult<abi::CommandOutcome, RString> {
        let gate = match self.gate(&spec) {
            Ok(gate) => gate,
            Err(refused) => return RResult::RErr(refused),
        };
        let run = self.runs.fetch_add(1, Ordering::Relaxed) + 1;
        let mut spill_path = self.spill_stem.clone().into_os_string();
        spill_path.push(format!("-{run}.log"));
        let workdir = PathBuf::from(spec.workdir.as_str());
        let (stdin, env) = (spec.stdin().map(String::into_bytes), spec.env());
        let request = RunRequest {
            command: spec.command.into_string(),
            workdir: workdir.clone(),
            timeout: spec.timeout_ms.into_option().map(Duration::from_millis),
            spill_path: spill_path.into(),
            policy: gate.policy.clone().map(|policy| policy.rules),
            environment: (!gate.escalated).then(|| self.session_id.clone()),
            temp_dir: gate.temp_dir.clone(),
            stdin,
            env,
        };
        let executor = Arc::clone(&self.executor);
        let live = Arc::clone(&self.live);
        let cancel = self.cancel.clone();
        match self.on_runtime(async move { executor.run(request, &live, &cancel).await }) {
            Ok(Ok(outcome)) => {
                *lock(&self.last_end) = end_reason(&outcome);
                let (facts, refused) = gate.facts(&outcome, &workdir);
                if let Some(line) = refused {
                    // On the card, after the command's own output (its last line or not).
                    let ends_a_line = [&outcome.stdout, &outcome.stderr]
                        .iter()
                        .all(|out| out.is_empty() || out.ends_with('\n'));
                    let start = if ends_a_line { "" } else { "\n" };
                    self.live.push(format!("{start}{line}\n").as_bytes());
                }
                RResult::ROk(to_abi_outcome(outcome, facts))
            }
            Ok(Err(error)) => RResult::RErr(error.to_string().into()),
            Err(error) => RResult::RErr(error),
        }
    }

    fn write_log(&self, level: abi::LogLevel, message: RStr<'_>) {
        let plugin = self.plugin.as_str();
        let message = message.as_str();
        match level {
            abi::LogLevel::Error => tracing::error!(plugin, "{message}"),
            abi::LogLevel::Warn => tracing::warn!(plugin, "{message}"),
            abi::LogLevel::Debug => tracing::debug!(plugin, "{message}"),
            // `Info`, or a level from a later 1.x.
            _ => tracing::info!(plugin, "{message}"),
        }
    }

    fn start_task(&self, spec: abi::CommandSpec) -> RResult<abi::TaskStarted, RString> {
        let gate = match self.gate(&spec) {
            Ok(gate) => gate,
            Err(refused) => return RResult::RErr(refused),
        };
        let command = spec.command.into_string();
        let request = StartRequest {
            command: command.clone(),
            workdir: PathBuf::from(spec.workdir.as_str()),
            owner: Some(self.session_id.clone()),
            output_dir: self.task_output_dir.clone(),
            environment: (!gate.escalated).then(|| self.session_id.clone()),
            policy: gate.policy.map(|policy| policy.rules),
            mode: gate.mode.as_str().to_owned(),
            temp_dir: gate.temp_dir.clone(),
            kind: self.tool.clone(),
        };
        let executor = Arc::clone(&self.executor);
        match self.on_runtime(async move { executor.start(request).await }) {
            Ok(Ok(started)) => {
                lock(&self.started).push(StartedTask {
                    task_id: started.id.0.clone(),
                    command,
                    output_path: started.output_path.clone(),
                });
                let mut task = abi::TaskStarted::default();
                task.task_id = started.id.0.into();
                task.output_path = started.output_path.to_string_lossy().into_owned().into();
                RResult::ROk(task)
            }
            Ok(Err(error)) => RResult::RErr(error.to_string().into()),
            Err(error) => RResult::RErr(error),
        }
    }

    fn read_task_output(&self, task_id: RStr<'_>) -> RResult<abi::TaskOutput, RString> {
        match self.executor.read_output(task_id.as_str()) {
            Ok(read) => {
                if !read.status.is_running() {
                    self.executor.mark_end_reported(task_id.as_str());
                }
                RResult::ROk(to_abi_read(read))
            }
            Err(error) => RResult::RErr(error.to_string().into()),
        }
    }

    fn kill_task(&self, task_id: RStr<'_>) -> RResult<abi::KillOutcome, RString> {
        let executor = Arc::clone(&self.executor);
        let id = task_id.as_str().to_owned();
        match self.on_runtime(async move { executor.kill(&id).await }) {
            Ok(Ok(Killed { killed, status })) => {
                if !status.is_running() {
                    self.executor.mark_end_reported(task_id.as_str());
                }
                let mut outcome = abi::KillOutcome::default();
                outcome.killed = killed;
                outcome.status = to_abi_status(status);
                RResult::ROk(outcome)
            }
            Ok(Err(error)) => RResult::RErr(error.to_string().into()),
            Err(error) => RResult::RErr(error),
        }
    }

    fn task_owner(&self, task_id: RStr<'_>) -> RResult<ROption<RString>, RString> {
        match self.executor.owner_of(task_id.as_str()) {
            Ok(owner) => RResult::ROk(owner.map(RString::from).into()),
            Err(error) => RResult::RErr(error.to_string().into()),
        }
    }
}

/// Why a command ended, in a sentence, unless it simply exited 0.
fn end_reason(outcome: &RunOutcome) -> Option<String> {
    let signal = outcome.signal.as_ref().map(|s| format!(" ({s})")).unwrap_or_default();
    if outcome.aborted {
        return Some(format!("Stopped: the user cancelled the turn{signal}."));
    }
    if outcome.timed_out {
        return Some(format!(
            "Stopped: timed out after {} ms{signal}.",
            outcome.timeout.as_millis()
        ));
    }
    match (outcome.exit_code, &outcome.signal) {
        (_, Some(signal)) => Some(format!("Killed by signal {signal}.")),
        (Some(0), None) => None,
        (Some(code), None) => Some(format!("Exited with code {code}.")),
        (None, None) => Some("Ended without an exit status.".to_owned()),
    }
}

fn to_abi_status(status: TaskStatus) -> abi::TaskStatus {
    let mut abi_status = abi::TaskStatus::default();
    abi_status.state = match status.state {
        TaskState::Running => abi::TaskState::Running,
        TaskState::Exited => abi::TaskState::Exited,
        TaskState::Killed => abi::TaskState::Killed,
    };
    abi_status.exit_code = status.exit_code.into();
    abi_status.signal = status.signal.map(RString::from).into();
    abi_status
}

fn to_abi_read(read: TaskRead) -> abi::TaskOutput {
    let mut output = abi::TaskOutput::default();
    output.text = read.text.into();
    output.dropped_bytes = read.dropped_bytes;
    output.output_path = read.output_path.to_string_lossy().into_owned().into();
    output.status = to_abi_status(read.status);
    output
}

fn to_abi_outcome(outcome: RunOutcome, sandbox: abi::SandboxFacts) -> abi::CommandOutcome {
    let mut abi_outcome = abi::CommandOutcome::default();
    abi_outcome.exit_code = outcome.exit_code.into();
    abi_outcome.signal = outcome.signal.map(RString::from).into();
    abi_outcome.timed_out = outcome.timed_out;
    abi_outcome.timeout_ms = outcome.timeout.as_millis() as u64;
    abi_outcome.aborted = outcome.aborted;
    abi_outcome.stdout = outcome.stdout.into();
    abi_outcome.stderr = outcome.stderr.into();
    abi_outcome.truncated = outcome.truncated;
    abi_outcome.spill_path = match &outcome.spill {
        Some(spill) => ROption::RSome(spill.path.to_string_lossy().into_owned().into()),
        None => ROption::RNone,
    };
    abi_outcome.spill_bytes = outcome.spill.as_ref().map_or(0, |s| s.bytes);
    abi_outcome.total_bytes = outcome.total_bytes;
    abi_outcome.duration_ms = outcome.duration.as_millis() as u64;
    abi_outcome.sandbox = sandbox;
    abi_outcome
}

#[cfg(test)]
mod tests {
    use super::*;
    use hotsh_abi::HostServices as _;

    #[test]
    fn a_panic_in_a_host_service_is_an_error_for_the_plugin() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime");
        let services = runtime.block_on(async {
            let (executor, _completions) = crate::executor::Executor::new(
                crate::executor::ExecutorConfig::default(),
                Vec::new(),
            )
            .expect("an executor");
            CallServices {
                runtime: tokio::runtime::Handle::current(),
                executor,
                cancel: CancellationToken::new(),
                live: Arc::new(LiveOutput::new(1024)),
                spill_stem: PathBuf::from("/dev/null/spill"),
                plugin: "test".to_owned(),
                tool: "test".to_owned(),
                runs: AtomicU32::new(0),
                session_id: "s".to_owned(),
                task_output_dir: PathBuf::from("/dev/null/tasks"),
                started: std::sync::Mutex::default(),
                last_end: std::sync::Mutex::default(),
                sandbox: CallSandbox {
                    sandbox: Arc::new(crate::sandbox::Sandbox::detect(
                        &Default::default(),
                        Vec::new(),
                    )),
                    session: None,
                    call_id: "call-1".to_owned(),
                    cwd: PathBuf::from("/"),
                    temp: None,
                    project_rules: crate::permissions::ProjectRules::new(None),
                    settings_allows: Vec::new(),
                },
            }
        });
        // Called from inside the runtime, the service's `block_on` panics.
        let spec = abi::CommandSpec::new("true", "/");
        let result = runtime.block_on(async { services.run(spec) });
        match result {
            RResult::RErr(error) => {
                assert!(error.as_str().starts_with("the host failed in `run`: "), "{error}")
            }
            RResult::ROk(_) => panic!("the service cannot have run"),
        }
    }
}
