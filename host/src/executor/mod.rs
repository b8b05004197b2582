//! The bash executor: the only module that spawns processes (ARCHITECTURE.md, invariant 2).
//!
//! Every command runs under a shim (`shim.rs`), a fork of the host's command supervisor
//! (`supervisor.rs`, the small `hotsh-shim` beside the host), that runs `bash -c <command>` in
//! a session of its own, re-parents the command's orphans to itself, and kills all of it when
//! the command ends, when it is told to stop, or when the host goes away (it watches a pipe
//! only the host holds the write end of). stdin is `/dev/null`; the environment is the host's
//! minus its secrets.
//!
//! Output goes several ways: for a foreground command, a bounded head and tail per stream for
//! the model, the full merged stream to a spill file (bounded) when the model's view is cut,
//! and a bounded live buffer a forwarder streams to the client; for a background task, an
//! output file from the start and a bounded buffer of output not yet read.

mod capture;
mod env;
mod environment;
mod helper;
mod output_root;
mod process;
mod service;
mod shim;
mod supervisor;
mod task;

pub(crate) use capture::CaptureLimits;
pub(crate) use env::{EnvPolicy, take_for_commands};
pub(crate) use helper::{HelperInput, run_helper, spawn_agent, spawn_tool};
pub(crate) use hotsh_core::executor::{
    Drained, Killed, LiveOutput, RunError, RunOutcome, RunRequest, RunningTask, StartRequest,
    Started, TaskEnded, TaskError, TaskId, TaskRead, TaskState, TaskStatus,
};
pub(crate) use output_root::{OutputRoot, SessionTemp, TempUse};
pub(crate) use process::ProcessHandle;
pub(crate) use process::{
    anonymous_file, descriptor_path, die_with_parent, free_range, own_executable,
};
pub(crate) use service::{ServiceControl, ServiceRequest};
pub(crate) use shim::PROGRAM as SHIM_PROGRAM;

use crate::sandbox::Policy;
use crate::sync::lock;
use capture::{OutputCapture, SpillFile, Stream};
use futures::future::BoxFuture;
use hotsh_core::executor::Executor as ExecutorPort;
use std::collections::HashMap;
use std::ffi::OsString;
use std::os::fd::{AsFd as _, AsRawFd as _, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use task::Task;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::net::unix::pipe;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Runs the command supervisor if this process was started as one. Call first thing in `main`
/// (the supervisor must be single-threaded: nothing may start a thread before).
pub fn run_shim_if_asked() {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    if args.first().is_some_and(|a| a == supervisor::SUBCOMMAND) {
        supervisor::main(&args[1..]);
    }
    if args.first().is_some_and(|a| a == crate::sandbox::SANDBOXED) {
        shim::sandboxed_main(&args[1..]);
    }
}

/// Marks every descriptor this process inherited (from 3 up) close-on-exec: none reaches a
/// program the host starts. Call first thing in `main`.
pub(crate) fn close_inherited_descriptors() {
    process::close_inherited(&[], process::Inherited::CloseOnExec);
}

/// Sandbox environments alive at once unless the configuration says otherwise: a user's
/// handful of active sessions each keep theirs warm; a client with hundreds does not start
/// hundreds.
pub(crate) const DEFAULT_MAX_ENVIRONMENTS: usize = 8;

/// Executor settings; the defaults are the documented contract.
#[derive(Debug, Clone)]
pub(crate) struct ExecutorConfig {
    pub(crate) shell: PathBuf,
    pub(crate) default_timeout: Duration,
    pub(crate) max_timeout: Duration,
    /// Between SIGTERM to a command and SIGKILL.
    pub(crate) kill_grace: Duration,
    /// How long to keep reading after the command's shim exited. Its pipes close as soon as
    /// the pump has read what is buffered (the shim has killed and reaped every writer), so
    /// this only bounds a pump starved of CPU on a loaded machine; it must not cut output.
    pub(crate) drain_grace: Duration,
    pub(crate) capture: CaptureLimits,
    /// Bytes of live output that may wait for the client between two forwards.
    pub(crate) live_cap: usize,
    /// Bytes of a background task's output kept between two reads.
    pub(crate) unread_cap: usize,
    /// Background tasks one owner (session) may have running at once.
    pub(crate) max_tasks_per_owner: usize,
    /// How long a session's idle sandbox environment is kept (`environment.rs`); zero:
    /// every confined command gets a sandbox of its own.
    pub(crate) keep_environment: Duration,
    /// The most sandbox environments alive at once, across sessions.
    pub(crate) max_environments: usize,
    /// bubblewrap, when it is the sandbox's backend: confined commands run under it (else
    /// under Landlock).
    pub(crate) bwrap: Option<PathBuf>,
}

impl Default for ExecutorConfig {
    fn default() -> Self {
        Self {
            shell: PathBuf::from("bash"),
            default_timeout: Duration::from_secs(120),
            max_timeout: Duration::from_secs(600),
            kill_grace: Duration::from_secs(2),
            drain_grace: Duration::from_secs(10),
            capture: CaptureLimits { model_budget: 30_000, spill_cap: 256 << 20 },
            live_cap: 256 << 10,
            unread_cap: 30_000,
            max_tasks_per_owner: 16,
            keep_environment: Duration::from_secs(600),
            max_environments: DEFAULT_MAX_ENVIRONMENTS,
            bwrap: None,
        }
    }
}

/// `program` found on the commands' `PATH` once, so that no command searches for it again;
/// a path, or a name not found, as given.
fn on_path(program: &Path, env: &[(OsString, OsString)]) -> PathBuf {
    if program.components().count() != 1 {
        return program.to_owned();
    }
    env.iter()
        .find(|(key, _)| key == "PATH")
        .and_then(|(_, path)| crate::dirs::find_on_path(program, path))
        .unwrap_or_else(|| program.to_owned())
}

/// The host's bash executor.
#[derive(Debug)]
pub(crate) struct Executor {
    config: ExecutorConfig,
    /// The environment every command gets, computed once from the host's.
    env: Vec<(OsString, OsString)>,
    /// Forks the shim of every command but those in a sandbox environment.
    supervisor: Arc<supervisor::Supervisor>,
    /// Sessions' sandbox environments, each with a supervisor of its own.
    environments: Arc<environment::Environments>,
    /// Read end of the lifeline, inherited by every shim (its number is an argument). The write end is only ever
    /// held by this process (close-on-exec), so its death is every shim's end of file.
    _lifeline_read: OwnedFd,
    _lifeline_write: OwnedFd,
    tasks: Mutex<HashMap<TaskId, Arc<Task>>>,
    /// Held from a start's limit check until its task is listed, so two starts at once cannot
    /// both pass the check.
    starting: Mutex<()>,
    next_task: AtomicU64,
    completions: mpsc::UnboundedSender<TaskEnded>,
    disposed: AtomicBool,
    /// Confined commands running now (foreground and background).
    confined_running: Arc<std::sync::atomic::AtomicUsize>,
    /// Read while a confined command starts, written while something must happen with none
    /// running (a file written through the client, which follows links: see
    /// [`ExecutorPort::pause_confined`]).
    confined_gate: Arc<tokio::sync::RwLock<()>>,
    /// Itself, for the tasks it spawns (each holds the executor until its task ends).
    me: std::sync::Weak<Executor>,
}

/// One running confined command, counted in [`Executor::confined_running`] while it lives.
#[derive(Debug)]
struct ConfinedRun(Arc<std::sync::atomic::AtomicUsize>);

impl ConfinedRun {
    /// Counts a confined command (`policy` set) and holds the gate while it is spawned.
    async fn start<'a>(
        executor: &'a Executor,
        policy: Option<&Policy>,
    ) -> (Option<Self>, Option<tokio::sync::RwLockReadGuard<'a, ()>>) {
        if policy.is_none() {
            return (None, None);
        }
        let gate = executor.confined_gate.read().await;
        executor.confined_running.fetch_add(1, Ordering::SeqCst);
        (Some(Self(Arc::clone(&executor.confined_running))), Some(gate))
    }
}

impl Drop for ConfinedRun {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Executor {
    /// The executor and the stream of background-task completions (exactly one per task,
    /// none after [`Executor::dispose`]).
    /// `env` is the commands' environment (already scrubbed of the host's secrets).
    pub(crate) fn new(
        mut config: ExecutorConfig,
        env: Vec<(OsString, OsString)>,
    ) -> std::io::Result<(Arc<Self>, mpsc::UnboundedReceiver<TaskEnded>)> {
        config.shell = on_path(&config.shell, &env);
        let (lifeline_read, lifeline_write) = lifeline()?;
        // Processes a command's killed shim leaves behind come to the host, which kills them.
        process::become_subreaper()?;
        process::spawn_sweeper()?;
        process::become_undumpable()?;
        process::raise_open_file_limit();
        let (completions, receiver) = mpsc::unbounded_channel();
        let executor = Arc::new_cyclic(|me| Self {
            config: config.clone(),
            env,
            supervisor: Arc::new(supervisor::Supervisor::new(lifeline_read.as_raw_fd())),
            environments: Arc::new(environment::Environments::new(
                config.keep_environment,
                config.max_environments,
            )),
            _lifeline_read: lifeline_read,
            _lifeline_write: lifeline_write,
            tasks: Mutex::default(),
            starting: Mutex::default(),
            next_task: AtomicU64::new(1),
            completions,
            disposed: AtomicBool::new(false),
            confined_running: Arc::default(),
            confined_gate: Arc::default(),
            me: me.clone(),
        });
        // Started beside the rest of the host's start-up, so that no command waits for it.
        let warm = Arc::clone(&executor);
        tokio::task::spawn_blocking(move || warm.supervisor.warm_up());
        if let Some(every) = executor.environments.check_every() {
            let environments = Arc::downgrade(&executor.environments);
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(every);
                tick.tick().await;
                loop {
                    tick.tick().await;
                    let Some(environments) = environments.upgrade() else { break };
                    let _ = tokio::task::spawn_blocking(move || environments.retire_idle()).await;
                }
            });
        }
        Ok((executor, receiver))
    }

    pub(crate) fn config(&self) -> &ExecutorConfig {
        &self.config
    }

    /// Starts a shim running `command` in `workdir`, its stdout and stderr going to `output`.
    /// Must run in the runtime's context (its pipes register with the runtime).
    fn spawn(
        &self,
        command: &str,
        workdir: &Path,
        confinement: Confinement<'_>,
        temp_dir: Option<&Path>,
        env: &[(String, String)],
        output: Output,
    ) -> Result<Spawned, RunError> {
        let extra: Vec<(String, String)> = temp_dir
            .map(|dir| ("TMPDIR".to_owned(), dir.to_string_lossy().into_owned()))
            .into_iter()
            .chain(env.iter().cloned())
            .collect();
        self.spawn_shim(command, &[], &extra, workdir, confinement, output)
    }

    /// [`Self::spawn`] with positional arguments for the command (`$0`, `$1`, …) and
    /// variables set on top of the commands' environment. The supervisor forks the shim; the
    /// host makes the pipes and keeps its ends.
    fn spawn_shim(
        &self,
        command: &str,
        positional: &[OsString],
        extra_env: &[(String, String)],
        workdir: &Path,
        confinement: Confinement<'_>,
        output: Output,
    ) -> Result<Spawned, RunError> {
        let Confinement { policy, environment } = confinement;
        if self.disposed.load(Ordering::SeqCst) {
            return Err(RunError::Disposed);
        }
        if !workdir.is_dir() {
            return Err(RunError::BadWorkdir(workdir.to_owned()));
        }
        let spawn_error = RunError::Spawn;
        let (stdin, host_stdin): (OwnedFd, _) = match output {
            Output::Service | Output::Fed => {
                let (read, write) = std::io::pipe().map_err(spawn_error)?;
                let write = pipe::Sender::from_owned_fd(write.into()).map_err(spawn_error)?;
                (read.into(), Some(write))
            }
            Output::Separate | Output::Merged => {
                (std::fs::File::open("/dev/null").map_err(spawn_error)?.into(), None)
            }
        };
        let (first, stdout) = host_pipe()?;
        let (second, stderr) = match output {
            Output::Service | Output::Separate | Output::Fed => {
                let (second, stderr) = host_pipe()?;
                (Some(second), stderr)
            }
            // One pipe for both streams: a background task's output is one stream, and
            // a task then costs one descriptor less.
            Output::Merged => (None, stdout.try_clone().map_err(spawn_error)?),
        };
        let (status_read, status) = host_pipe()?;
        let job = shim::Job {
            grace: self.config.kill_grace,
            policy: policy.cloned(),
            shell: self.config.shell.clone().into_os_string(),
            command: command.into(),
            positional: positional.to_vec(),
            // A variable set on top replaces the commands' own (a program reads the first
            // of two entries with one name).
            env: self
                .env
                .iter()
                .filter(|(name, _)| !extra_env.iter().any(|(extra, _)| name == extra.as_str()))
                .cloned()
                .chain(extra_env.iter().map(|(k, v)| (k.into(), v.into())))
                .collect(),
            workdir: workdir.as_os_str().to_owned(),
        };
        let pipes = [stdin.as_fd(), stdout.as_fd(), stderr.as_fd(), status.as_fd()];
        let started = match (policy, environment) {
            (Some(policy), Some(owner)) if self.environments.serve() => {
                match self.environments.get(&self.supervisor, owner, policy) {
                    None => self.supervisor.start(&job, pipes),
                    Some(env) => match env.supervisor.try_start(&job, pipes) {
                        Ok(started) => Ok(started),
                        Err(supervisor::StartError::Launch(error)) => {
                            tracing::warn!(%error, "no sandbox environment; the command gets a sandbox of its own");
                            self.environments.discard(&env);
                            self.supervisor.start(&job, pipes)
                        }
                        Err(supervisor::StartError::Job(error)) => Err(error),
                    },
                }
            }
            _ => self.supervisor.start(&job, pipes),
        }
        .map_err(spawn_error)?;
        // The host's copies of the shim's ends close here, so each pipe ends with the shim.
        drop((stdin, stdout, stderr, status));
        Ok(Spawned {
            exit: ShimExit { pipe: status_read, status: Vec::new() },
            process: ProcessHandle::supervised(started.pid, started.pidfd),
            pipes: Pipes {
                first: Some(Box::new(first)),
                second: second.map(|p| Box::new(p) as Box<dyn Pipe>),
            },
            stdin: host_stdin,
        })
    }

    /// Runs a command to its end (or until it is stopped), streaming output into `live`. The
    /// caller closes `live` when the call it belongs to is over (a call may run several
    /// commands into one card).
    async fn run(
        &self,
        request: RunRequest,
        live: &LiveOutput,
        cancel: &CancellationToken,
    ) -> Result<RunOutcome, RunError> {
        let timeout =
            request.timeout.unwrap_or(self.config.default_timeout).min(self.config.max_timeout);
        let started_at = Instant::now();
        let policy = request.policy.map(|rules| self.enforced(rules));
        let (_confined, gate) = ConfinedRun::start(self, policy.as_ref()).await;
        let confinement = Confinement::of(policy.as_ref(), request.environment.as_deref());
        let output = if request.stdin.is_some() { Output::Fed } else { Output::Separate };
        let Spawned { mut exit, process, pipes, stdin } = self.spawn(
            &request.command,
            &request.workdir,
            confinement,
            request.temp_dir.as_deref(),
            &request.env,
            output,
        )?;
        drop(gate);
        if let (Some(mut pipe), Some(bytes)) = (stdin, request.stdin) {
            // Fed on a task of its own: a command that reads slowly, or not at all, does not
            // hold up reading its output; the pipe closes once all is written (or the command
            // is gone).
            tokio::spawn(async move {
                use tokio::io::AsyncWriteExt as _;
                let _ = pipe.write_all(&bytes).await;
            });
        }
        let mut capture = OutputCapture::new(self.config.capture, request.spill_path);

        // The pump borrows the capture; the block ends both borrows before `finish`.
        let (status, timed_out, aborted) = {
            let mut reader = PipeReader::new(pipes);
            let pump = async {
                while let Some((stream, bytes)) = reader.next().await {
                    capture.push(stream, bytes).await;
                    live.push(bytes);
                }
            };
            tokio::pin!(pump);
            let mut pump_done = false;
            let deadline = tokio::time::sleep(timeout);
            tokio::pin!(deadline);
            let mut timed_out = false;
            let mut aborted = false;
            let mut last_resort: Option<tokio::time::Instant> = None;

            let status = loop {
                tokio::select! {
                    status = exit.wait() => break status,
                    () = &mut pump, if !pump_done => pump_done = true,
                    () = &mut deadline, if !timed_out && !aborted => {
                        timed_out = true;
                        last_resort = Some(self.stop(&process));
                    }
                    () = cancel.cancelled(), if !timed_out && !aborted => {
                        aborted = true;
                        last_resort = Some(self.stop(&process));
                    }
                    () = sleep_until_opt(last_resort) => {
                        kill_shim(&process);
                        last_resort = None;
                    }
                }
            };
            if !pump_done {
                let _ = tokio::time::timeout(self.config.drain_grace, &mut pump).await;
            }
            (status, timed_out, aborted)
        };

        let captured = capture.finish().await;
        let end = status.map_err(RunError::Wait)?;
        let (exit_code, signal) = exit_of(end.status);
        Ok(RunOutcome {
            exit_code,
            signal,
            not_run: end.not_run,
            timed_out,
            timeout,
            aborted,
            stdout: captured.stdout,
            stderr: captured.stderr,
            truncated: captured.truncated,
            spill: captured.spill,
            total_bytes: captured.total_bytes,
            duration: started_at.elapsed(),
        })
    }

    /// Asks a shim to stop its command; see [`stop_shim`].
    fn stop(&self, process: &ProcessHandle) -> tokio::time::Instant {
        stop_shim(process, self.config.kill_grace)
    }

    /// `rules` as this executor's backend enforces them.
    fn enforced(&self, rules: hotsh_core::executor::Policy) -> Policy {
        Policy { bwrap: self.config.bwrap.clone(), rules }
    }

    /// Starts a background task and returns at once. Must run in the runtime's context.
    async fn start(&self, request: StartRequest) -> Result<Started, RunError> {
        let executor = self.me.upgrade().ok_or(RunError::Disposed)?;
        let policy = request.policy.map(|rules| self.enforced(rules));
        let (confined, _gate) = ConfinedRun::start(self, policy.as_ref()).await;
        let _starting = lock(&self.starting);
        let running = lock(&self.tasks)
            .values()
            .filter(|t| t.owner == request.owner && t.status().is_running())
            .count();
        let limit = self.config.max_tasks_per_owner;
        if running >= limit {
            return Err(RunError::TooManyTasks { running, limit });
        }
        let confinement = Confinement::of(policy.as_ref(), request.environment.as_deref());
        let Spawned { mut exit, process, pipes, .. } = self.spawn(
            &request.command,
            &request.workdir,
            confinement,
            request.temp_dir.as_deref(),
            &[],
            Output::Merged,
        )?;
        let number = self.next_task.fetch_add(1, Ordering::SeqCst);
        let id = TaskId(format!("{}-{number}", id_prefix(&request.kind)));
        let output_path = request.output_dir.join(format!("{id}.log"));
        let mut output = SpillFile::eager(output_path.clone(), self.config.capture.spill_cap);
        let task = Arc::new(Task::new(
            id.clone(),
            request.owner,
            request.command,
            process,
            self.config.unread_cap,
            output_path.clone(),
            task::Confinement { policy, mode: request.mode, workdir: request.workdir },
        ));
        lock(&self.tasks).insert(id.clone(), Arc::clone(&task));
        tokio::spawn(async move {
            let _confined = confined;
            output.open_now().await;
            let status = {
                let mut reader = PipeReader::new(pipes);
                let pump = async {
                    while let Some((_, bytes)) = reader.next().await {
                        task.push(bytes);
                        output.write(bytes).await;
                    }
                };
                tokio::pin!(pump);
                let mut pump_done = false;
                let status = loop {
                    tokio::select! {
                        status = exit.wait() => break status,
                        () = &mut pump, if !pump_done => pump_done = true,
                    }
                };
                // The shim killed every writer before it exited, so the pipe ends at once; the
                // bound only matters if the shim itself was killed.
                if !pump_done {
                    let _ = tokio::time::timeout(executor.config.drain_grace, &mut pump).await;
                }
                status
            };
            output.finish().await;
            let killed = task.kill_requested.load(Ordering::SeqCst);
            let status = match status {
                Ok(end) => {
                    task.not_run.store(end.not_run, Ordering::SeqCst);
                    let (exit_code, signal) = exit_of(end.status);
                    let state = if killed { TaskState::Killed } else { TaskState::Exited };
                    TaskStatus { state, exit_code, signal }
                }
                Err(error) => {
                    // The shim cannot be waited for: make sure it is gone, and say so.
                    tracing::warn!(task = %task.id, %error, "cannot wait for a background task; killing it");
                    kill_shim(&task.process);
                    TaskStatus { state: TaskState::Killed, exit_code: None, signal: None }
                }
            };
            task.finish(status);
            task.process.release();
            if !executor.disposed.load(Ordering::SeqCst)
                && let Some(ended) = executor.ended(&task.id.0)
            {
                let _ = executor.completions.send(ended);
            }
        });
        Ok(Started { id, output_path })
    }

    fn task(&self, id: &str) -> Result<Arc<Task>, TaskError> {
        lock(&self.tasks)
            .get(&TaskId(id.to_owned()))
            .cloned()
            .ok_or_else(|| TaskError::Unknown(id.to_owned()))
    }

    /// How a task ended, or `None` while it runs (or if the id is unknown); whether its end
    /// looks like a sandbox denial is judged from its policy and the end of its output, as a
    /// foreground command's is.
    pub(crate) fn ended(&self, id: &str) -> Option<TaskEnded> {
        let task = self.task(id).ok()?;
        let status = task.status();
        if status.is_running() {
            return None;
        }
        let not_run = task.not_run.load(Ordering::SeqCst);
        let confinement = &task.confinement;
        let tail = task.tail();
        let denied = confinement.policy.as_ref().and_then(|policy| {
            crate::sandbox::classify::classify(
                policy,
                &crate::sandbox::classify::Evidence {
                    exit_code: status.exit_code,
                    signal: status.signal.as_deref(),
                    output: [&tail, ""],
                    workdir: &confinement.workdir,
                    not_run,
                },
            )
        });
        Some(TaskEnded {
            id: task.id.clone(),
            owner: task.owner.clone(),
            command: task.command.clone(),
            status,
            output_path: task.output_path().clone(),
            mode: confinement.mode.clone(),
            denied: denied.map(|d| d.as_str().to_owned()),
            not_run,
        })
    }

    /// Kills a task's whole process group and waits for it to end.
    async fn kill(&self, id: &str) -> Result<Killed, TaskError> {
        let task = self.task(id)?;
        let status = task.status();
        if !status.is_running() {
            return Ok(Killed { killed: false, status });
        }
        task.kill_requested.store(true, Ordering::SeqCst);
        let last_resort = self.stop(&task.process);
        let status = tokio::select! {
            status = task.ended() => status,
            () = tokio::time::sleep_until(last_resort) => {
                kill_shim(&task.process);
                task.ended().await
            }
        };
        Ok(Killed { killed: true, status })
    }

    /// Holds off confined commands while none runs; `None` when one is running. A write the
    /// client makes by path follows symbolic links a confined command could be swapping in
    /// at that moment; with none running, none can.
    async fn pause_confined(&self) -> Option<hotsh_core::executor::Pause> {
        let no_start = Arc::clone(&self.confined_gate).write_owned().await;
        if self.confined_running.load(Ordering::SeqCst) > 0 {
            return None;
        }
        Some(Box::new(no_start))
    }

    /// Kills every running task of `owner` (a session that closes) and waits for them to end;
    /// its sandbox environments take no more jobs.
    async fn kill_owned_by(&self, owner: &str) {
        self.environments.retire_owner(owner);
        let ids: Vec<String> = lock(&self.tasks)
            .values()
            .filter(|t| t.owner.as_deref() == Some(owner) && t.status().is_running())
            .map(|t| t.id.0.clone())
            .collect();
        let kills = ids.iter().map(|id| self.kill(id));
        for result in futures::future::join_all(kills).await {
            if let Err(error) = result {
                tracing::debug!(%error, "a task of a closing session was gone already");
            }
        }
    }

    /// Stops every running task and waits (within the grace period) for them to end. No
    /// completion is reported afterwards.
    pub(crate) async fn dispose(&self) {
        self.disposed.store(true, Ordering::SeqCst);
        let running: Vec<Arc<Task>> =
            lock(&self.tasks).values().filter(|t| t.status().is_running()).cloned().collect();
        for task in &running {
            task.kill_requested.store(true, Ordering::SeqCst);
            self.stop(&task.process);
        }
        let all_ended = futures::future::join_all(running.iter().map(|t| t.ended()));
        let grace = self.config.kill_grace + Duration::from_secs(1);
        if tokio::time::timeout(grace, all_ended).await.is_err() {
            tracing::warn!("some background tasks did not end in time; killing their shims");
            for task in running.iter().filter(|t| t.status().is_running()) {
                kill_shim(&task.process);
            }
        }
        // The supervisor exits once its shims are gone (it kills what a killed shim left
        // behind); whatever came to the host (the shims of a supervisor that died) is killed
        // before the host goes.
        let _ = tokio::task::spawn_blocking({
            let supervisor = Arc::clone(&self.supervisor);
            let environments = Arc::clone(&self.environments);
            move || {
                environments.close_all(Duration::from_secs(1));
                supervisor.close(Duration::from_secs(1));
                process::sweep_until_clear(Duration::from_secs(1));
            }
        })
        .await;
    }
}

impl ExecutorPort for Executor {
    fn run<'a>(
        &'a self,
        request: RunRequest,
        live: &'a LiveOutput,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<RunOutcome, RunError>> {
        Box::pin(Executor::run(self, request, live, cancel))
    }

    fn start(&self, request: StartRequest) -> BoxFuture<'_, Result<Started, RunError>> {
        Box::pin(Executor::start(self, request))
    }

    fn read_output(&self, id: &str) -> Result<TaskRead, TaskError> {
        Ok(self.task(id)?.read())
    }

    fn kill<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Killed, TaskError>> {
        Box::pin(Executor::kill(self, id))
    }

    fn owner_of(&self, id: &str) -> Result<Option<String>, TaskError> {
        Ok(self.task(id)?.owner.clone())
    }

    fn mark_end_reported(&self, id: &str) {
        if let Ok(task) = self.task(id) {
            task.end_reported.store(true, Ordering::SeqCst);
        }
    }

    fn end_reported(&self, id: &str) -> bool {
        self.task(id).is_ok_and(|task| task.end_reported.load(Ordering::SeqCst))
    }

    fn running_owned_by(&self, owner: &str) -> Vec<RunningTask> {
        let mut running: Vec<RunningTask> = lock(&self.tasks)
            .values()
            .filter(|t| t.owner.as_deref() == Some(owner) && t.status().is_running())
            .map(|t| RunningTask {
                id: t.id.0.clone(),
                command: t.command.clone(),
                mode: t.confinement.mode.clone(),
            })
            .collect();
        running.sort();
        running
    }

    fn kill_owned_by<'a>(&'a self, owner: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(Executor::kill_owned_by(self, owner))
    }

    fn prepare(&self, owner: &str, rules: &hotsh_core::executor::Policy) {
        if !self.disposed.load(Ordering::SeqCst) && self.environments.serve() {
            let policy = self.enforced(rules.clone());
            if let Some(env) = self.environments.get(&self.supervisor, owner, &policy) {
                env.supervisor.warm_up();
            }
        }
    }

    fn pause_confined(&self) -> BoxFuture<'_, Option<hotsh_core::executor::Pause>> {
        Box::pin(Executor::pause_confined(self))
    }
}

/// How a command is confined: its policy (`None`: unconfined) and the session whose sandbox
/// environment it may run in.
#[derive(Debug, Clone, Copy, Default)]
struct Confinement<'a> {
    policy: Option<&'a Policy>,
    environment: Option<&'a str>,
}

impl<'a> Confinement<'a> {
    fn of(policy: Option<&'a Policy>, environment: Option<&'a str>) -> Self {
        Self { policy, environment }
    }
}

/// The pipe whose write end only the host holds. The read end is inherited by the processes
/// the host starts (shims watch it; the plugin checker ignores it); the write end is
/// close-on-exec, so end of file there means the host is gone.
fn lifeline() -> std::io::Result<(OwnedFd, OwnedFd)> {
    use std::os::fd::AsRawFd as _;
    // Both ends close-on-exec (std makes them so), then the read end inherited again.
    let (read, write) = std::io::pipe()?;
    let (read, write) = (OwnedFd::from(read), OwnedFd::from(write));
    // SAFETY: fcntl on a descriptor just made.
    if unsafe { libc::fcntl(read.as_raw_fd(), libc::F_SETFD, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((read, write))
}

/// Asks a shim to stop its command (SIGTERM, SIGKILL after `grace`; SIGCONT in case the
/// command stopped its shim). Returns when to kill the shim itself if it has not exited by
/// then.
fn stop_shim(process: &ProcessHandle, grace: Duration) -> tokio::time::Instant {
    process.signal(libc::SIGTERM);
    process.signal(libc::SIGCONT);
    tokio::time::Instant::now() + grace + Duration::from_secs(5)
}

/// Kills a shim that did not stop in time (its shell then dies with it; what it leaves
/// behind is re-parented to the host and swept).
fn kill_shim(process: &ProcessHandle) {
    tracing::warn!(pid = ?process.pid(), "a command's shim did not stop in time; killing it");
    process.signal(libc::SIGKILL);
}

fn exit_of(status: std::process::ExitStatus) -> (Option<i32>, Option<String>) {
    (status.code(), status.signal().map(signal_name))
}

/// A shim just started: how to learn its end, how to signal it, its pipes.
struct Spawned {
    exit: ShimExit,
    process: ProcessHandle,
    pipes: Pipes,
    /// The write end of its stdin, for [`Output::Service`].
    stdin: Option<pipe::Sender>,
}

/// How the host learns that a shim has ended: the status pipe, on which the shim writes the
/// shell's wait status just before it exits.
struct ShimExit {
    pipe: pipe::Receiver,
    status: Vec<u8>,
}

impl ShimExit {
    /// Waits until the shim has reported how the command ended (it has then killed and
    /// reaped all of the command, and only exits), or until its end of the pipe is closed.
    /// Cancel-safe. A shim that was killed before it could say anything ended by SIGKILL.
    async fn wait(&mut self) -> std::io::Result<ShimEnd> {
        let mut buf = [0u8; 5];
        while self.status.len() < 5 {
            match self.pipe.read(&mut buf[..5 - self.status.len()]).await? {
                0 => break,
                n => self.status.extend_from_slice(&buf[..n]),
            }
        }
        let status = self
            .status
            .first_chunk::<4>()
            .map_or(libc::SIGKILL, |bytes| i32::from_le_bytes(*bytes));
        Ok(ShimEnd {
            status: std::process::ExitStatus::from_raw(status),
            not_run: self.status.get(4) == Some(&shim::NOT_RUN),
        })
    }
}

/// How a shim ended: the shell's wait status, and whether the command never started (the
/// shim could not enter its folder, confine it or start the shell, and said why on stderr).
#[derive(Debug, Clone, Copy)]
struct ShimEnd {
    status: std::process::ExitStatus,
    not_run: bool,
}

/// A pipe whose read end is the host's (registered with the runtime) and whose write end is
/// for a shim (blocking, as a command expects its output to be).
fn host_pipe() -> Result<(pipe::Receiver, OwnedFd), RunError> {
    let (read, write) = std::io::pipe().map_err(RunError::Spawn)?;
    let read = pipe::Receiver::from_owned_fd(read.into()).map_err(RunError::Spawn)?;
    Ok((read, write.into()))
}

/// Where a shim's stdout and stderr go.
#[derive(Debug, Clone, Copy)]
enum Output {
    /// stdin, stdout and stderr each a pipe of its own (an MCP server: the host speaks on the
    /// first two and keeps the tail of the third).
    Service,
    /// Two pipes, read apart (a foreground command: the model sees the streams apart).
    Separate,
    /// As `Separate`, with a pipe on stdin the host feeds.
    Fed,
    /// One pipe for both (a background task).
    Merged,
}

/// A pipe the pump reads.
trait Pipe: AsyncRead + Unpin + Send {}
impl<T: AsyncRead + Unpin + Send> Pipe for T {}

/// The pipes of one shim: stdout (or both streams merged) and stderr.
struct Pipes {
    first: Option<Box<dyn Pipe>>,
    second: Option<Box<dyn Pipe>>,
}

/// Reads a shim's pipes chunk by chunk until both are closed. The caller handles each chunk
/// before asking for the next (its writes may wait: the command's pipe then fills).
struct PipeReader {
    stdout: Option<Box<dyn Pipe>>,
    stderr: Option<Box<dyn Pipe>>,
    out_buf: Vec<u8>,
    err_buf: Vec<u8>,
}

impl PipeReader {
    fn new(pipes: Pipes) -> Self {
        Self {
            stdout: pipes.first,
            stderr: pipes.second,
            out_buf: vec![0u8; 64 << 10],
            err_buf: vec![0u8; 64 << 10],
        }
    }

    /// The next chunk, or `None` once both pipes are closed.
    async fn next(&mut self) -> Option<(Stream, &[u8])> {
        while self.stdout.is_some() || self.stderr.is_some() {
            tokio::select! {
                read = read_some(&mut self.stdout, &mut self.out_buf) => match read {
                    Some(n) => return Some((Stream::Stdout, &self.out_buf[..n])),
                    None => self.stdout = None,
                },
                read = read_some(&mut self.stderr, &mut self.err_buf) => match read {
                    Some(n) => return Some((Stream::Stderr, &self.err_buf[..n])),
                    None => self.stderr = None,
                },
            }
        }
        None
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

/// A task id's prefix from what started it: letters, digits, `_` and `-` (the id names its
/// output file), `task` when nothing is left.
fn id_prefix(kind: &str) -> String {
    let prefix: String = kind
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' })
        .take(64)
        .collect();
    if prefix.is_empty() { "task".to_owned() } else { prefix }
}
