//! The host: owner of every long-lived resource (sessions, plugins, the executor and its
//! background tasks, the model).

use crate::config::ConfigFile;
use crate::executor::{EnvPolicy, Executor, ExecutorConfig, OutputRoot, SessionTemp};
use crate::model::setup::ModelChoices;
use crate::model::{self, Model, Transcript};
use crate::plugins::{PluginChange, Registry, watch_plugin_dirs};
use crate::sandbox::Sandbox;
use crate::session::fold::Folded;
use crate::session::store::{SessionStore, StoreError};
use crate::session::{
    EventSink, LogWriter, Narrowing, Session, SessionEvent, SessionId, SessionMeta,
};
use crate::sync::lock;
use hotsh_core::executor::Executor as _;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// How the agent is set up (from the command line and the config file).
#[derive(Debug, Clone)]
pub(crate) struct HostConfig {
    pub(crate) models: ModelChoices,
    /// Variables the configuration names as holding keys: secrets like the built-in ones.
    pub(crate) key_variables: Vec<String>,
    pub(crate) plugin_dirs: Vec<PathBuf>,
    pub(crate) model_transcript: Option<PathBuf>,
    pub(crate) executor: ExecutorConfig,
    pub(crate) env_keep: Vec<String>,
    pub(crate) env_drop: Vec<String>,
    /// The private directory of output files is made in here.
    pub(crate) temp_dir: PathBuf,
    /// Record an arc here.
    pub(crate) record: Option<PathBuf>,
    /// Where session logs live (`None`: nowhere; creating a session then fails).
    pub(crate) data_dir: Option<PathBuf>,
    /// Log a warning when no plugin provides a tool (`hotsh run` says so itself, as an error).
    pub(crate) warn_without_tools: bool,
    pub(crate) sandbox: crate::sandbox::SandboxConfig,
    /// What hotsh trusts besides the plugin directories (its data directory, its
    /// configuration, its executable's directory): read-only to confined commands.
    pub(crate) trusted: Vec<crate::sandbox::Trusted>,
    /// MCP limits and the configured servers.
    pub(crate) mcp: crate::mcp::McpSetup,
    /// The commands' environment, taken (and hidden from the process) at start-up; `None`:
    /// the process's own, scrubbed.
    pub(crate) command_env: Option<Vec<(std::ffi::OsString, std::ffi::OsString)>>,
    /// The config's `[hooks]`, in Claude Code's shape.
    pub(crate) hooks: serde_json::Value,
    /// `~/.claude` (the user's Claude Code settings and their hooks).
    pub(crate) claude_home: Option<PathBuf>,
    /// The hooks an arc recorded for each turn, run instead of the settings files' (a replay).
    pub(crate) hooks_replay: Option<Vec<serde_json::Value>>,
    /// Resolves the models again (`authenticate`, ACP `logout`); `None`: they are fixed.
    pub(crate) remodel: Option<Remodel>,
    /// The config's agent definitions (`[agents]`).
    pub(crate) agents: std::collections::BTreeMap<String, crate::agents::AgentConfig>,
    /// Subagents running at once, and how deep they nest.
    pub(crate) max_parallel: usize,
    pub(crate) max_depth: u32,
}

/// Resolves the model choices again, from the configuration and the environment with the
/// stored key as they are now.
#[derive(Clone)]
pub(crate) struct Remodel(
    pub(crate) Arc<dyn Fn() -> Result<model::setup::ModelChoices, String> + Send + Sync>,
);

impl std::fmt::Debug for Remodel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Remodel")
    }
}

/// The most subagents `[subagents] max_parallel` lets run at once.
const MAX_PARALLEL_LIMIT: usize = 64;
/// The deepest `[subagents] max_depth` lets subagents nest.
const MAX_DEPTH_LIMIT: u32 = 4;

impl HostConfig {
    /// Checks every setting's range: a value out of range is an error at start-up, never a
    /// silent wrap or clamp.
    pub(crate) fn new(
        models: ModelChoices,
        plugin_dirs: Vec<PathBuf>,
        file: ConfigFile,
    ) -> anyhow::Result<Self> {
        let key_variables = file.models.values().filter_map(|p| p.api_key_env.clone()).collect();
        let mut executor = ExecutorConfig::default();
        if let Some(max) = file.executor.max_background_tasks {
            anyhow::ensure!(
                (1..=MAX_TASKS_LIMIT).contains(&max),
                "config: executor.max_background_tasks must be between 1 and {MAX_TASKS_LIMIT}, got {max}"
            );
            executor.max_tasks_per_owner = max;
        }
        if let Some(mib) = file.executor.spill_cap_mib {
            anyhow::ensure!(
                (1..=MAX_SPILL_CAP_MIB).contains(&mib),
                "config: executor.spill_cap_mib must be between 1 and {MAX_SPILL_CAP_MIB} (1 TiB), got {mib}"
            );
            executor.capture.spill_cap = mib << 20;
        }
        if let Some(seconds) = file.sandbox.keep_environment_s {
            anyhow::ensure!(
                seconds <= MAX_KEEP_ENVIRONMENT_S,
                "config: sandbox.keep_environment_s must be between 0 and {MAX_KEEP_ENVIRONMENT_S} (a day), got {seconds}"
            );
            executor.keep_environment = std::time::Duration::from_secs(seconds);
        }
        if let Some(max) = file.sandbox.max_environments {
            anyhow::ensure!(
                (1..=MAX_ENVIRONMENTS_LIMIT).contains(&max),
                "config: sandbox.max_environments must be between 1 and {MAX_ENVIRONMENTS_LIMIT}, got {max}"
            );
            executor.max_environments = max;
        }
        let max_parallel =
            file.subagents.max_parallel.unwrap_or(crate::subagents::DEFAULT_PARALLEL);
        anyhow::ensure!(
            (1..=MAX_PARALLEL_LIMIT).contains(&max_parallel),
            "config: subagents.max_parallel must be between 1 and {MAX_PARALLEL_LIMIT}, got {max_parallel}"
        );
        let max_depth = file.subagents.max_depth.unwrap_or(crate::subagents::DEFAULT_DEPTH);
        anyhow::ensure!(
            max_depth <= MAX_DEPTH_LIMIT,
            "config: subagents.max_depth must be between 0 and {MAX_DEPTH_LIMIT}, got {max_depth}"
        );
        Ok(Self {
            agents: file.agents,
            max_parallel,
            max_depth,
            models,
            key_variables,
            plugin_dirs,
            model_transcript: None,
            executor,
            env_keep: file.env.keep,
            env_drop: file.env.drop,
            temp_dir: std::env::temp_dir(),
            data_dir: None,
            record: file.record.clone(),
            warn_without_tools: true,
            sandbox: file.sandbox,
            trusted: Vec::new(),
            mcp: crate::mcp::McpSetup::from_config(&file.mcp)?,
            command_env: None,
            hooks: file.hooks,
            claude_home: crate::config::claude_home(),
            hooks_replay: None,
            remodel: None,
        })
    }

    /// What of the host's environment commands do not see: the model keys (built in and
    /// configured), what looks like a credential, the configuration's `[env]` lists.
    pub(crate) fn env_policy(&self) -> EnvPolicy {
        EnvPolicy {
            host_secrets: MODEL_SECRETS
                .iter()
                .map(|s| (*s).to_owned())
                .chain(self.key_variables.iter().cloned())
                .collect(),
            keep: self.env_keep.clone(),
            drop: self.env_drop.clone(),
        }
    }
}

/// The highest `sandbox.max_environments` accepted.
const MAX_ENVIRONMENTS_LIMIT: usize = 1024;

/// The longest `sandbox.keep_environment_s` accepted.
const MAX_KEEP_ENVIRONMENT_S: u64 = 86_400;

/// The highest `executor.max_background_tasks` accepted.
const MAX_TASKS_LIMIT: usize = 4096;
/// The highest `executor.spill_cap_mib` accepted (1 TiB).
const MAX_SPILL_CAP_MIB: u64 = 1 << 20;

#[derive(Debug)]
pub(crate) struct Host {
    pub(crate) registry: Arc<Registry>,
    executor: Arc<Executor>,
    pub(crate) sandbox: Arc<Sandbox>,
    /// The models a session can use; replaced when the user logs in or out.
    models: Mutex<Arc<Models>>,
    /// Resolves the models again (the stored key may have changed); `None`: they are fixed.
    pub(crate) remodel: Option<Remodel>,
    transcript: Option<Arc<Transcript>>,
    output_root: Arc<OutputRoot>,
    runtime: tokio::runtime::Handle,
    sessions: Mutex<HashMap<SessionId, Arc<Session>>>,
    store: SessionStore,
    /// Records an arc, when asked to.
    pub(crate) recorder: Option<Arc<crate::arc::Recorder>>,
    mcp_setup: crate::mcp::McpSetup,
    /// The rules the user allowed in projects ("Always allow in this project").
    pub(crate) project_rules: crate::permissions::ProjectRules,
    /// The user's command hooks.
    pub(crate) hooks: Arc<crate::hooks::HookHost>,
    /// Each open session's own tool providers (its MCP servers), offered after the agent's.
    own_tools: OwnTools,
    /// Subagents: how many may run at once, how deep they nest.
    pub(crate) subagents: SubagentLimits,
    /// This host (its subagent tool holds it while a turn runs).
    me: std::sync::Weak<Host>,
}

/// The bounds of subagents, across the agent.
#[derive(Debug)]
pub(crate) struct SubagentLimits {
    pub(crate) slots: Arc<tokio::sync::Semaphore>,
    pub(crate) max_depth: u32,
}

/// Each open session's own tool providers.
#[derive(Default)]
struct OwnTools(Mutex<HashMap<SessionId, Vec<Arc<dyn hotsh_core::tools::ToolProvider>>>>);

impl std::fmt::Debug for OwnTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnTools").field("sessions", &lock(&self.0).len()).finish()
    }
}

/// A model a session can use.
#[derive(Debug, Clone)]
struct Offered {
    name: String,
    /// One line for a model picker.
    description: String,
    model: Arc<dyn Model>,
    limits: hotsh_core::context::Limits,
    price: Option<hotsh_core::context::Price>,
    /// Its reasoning-effort levels (none: it offers no choice), and the default.
    efforts: Vec<String>,
    default_effort: Option<String>,
}

/// How long after a turn begins its session's sandbox environment starts (see
/// [`Host::prepare_sandbox`]); a first command sooner than that starts it itself.
const PREPARE_AFTER: std::time::Duration = std::time::Duration::from_millis(10);
/// How long a turn cancelled because the client went away is given to end.
const TURN_END_ON_EXIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Variables that hold model credentials; commands never see them (nor copies of their values).
const MODEL_SECRETS: &[&str] =
    &["DEEPSEEK_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "HOTSH_API_KEY"];

/// The models on offer, and what follows from them.
#[derive(Debug)]
struct Models {
    /// By name; the first is the default.
    offered: Vec<Offered>,
    takes_images: bool,
    /// The default model cannot answer until the user gives a key (`hotsh login`).
    needs_key: bool,
}

impl Models {
    fn offer(choices: &model::setup::ModelChoices) -> anyhow::Result<Self> {
        // Choices that play one script share it: a session that changes its model goes on
        // with the script's next answer, as with the recorded models it plays.
        let mut scripts: Vec<(&std::path::Path, Arc<dyn Model>)> = Vec::new();
        let offered = choices
            .choices
            .iter()
            .map(|choice| {
                let (efforts, default_effort) = choice.efforts();
                let model = match &choice.spec {
                    model::ModelSpec::Script(path) => {
                        match scripts.iter().find(|(known, _)| *known == path.as_path()) {
                            Some((_, model)) => Arc::clone(model),
                            None => {
                                let model = model::open(&choice.spec)?;
                                scripts.push((path, Arc::clone(&model)));
                                model
                            }
                        }
                    }
                    spec => model::open(spec)?,
                };
                Ok(Offered {
                    name: choice.name.clone(),
                    description: choice.description.clone(),
                    model,
                    limits: choice.limits,
                    price: choice.price.clone(),
                    efforts,
                    default_effort,
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(Self {
            offered,
            takes_images: choices.take_images(),
            needs_key: choices.choices[0].spec.needs_key(),
        })
    }
}

impl Host {
    /// Builds the host and starts loading plugins in the background: the agent answers
    /// `initialize` at once, and the first turn waits for the scan to finish.
    pub(crate) fn start(config: HostConfig) -> anyhow::Result<Arc<Self>> {
        let models = Models::offer(&config.models)?;
        let transcript =
            config.model_transcript.as_deref().map(Transcript::create).transpose()?.map(Arc::new);
        let command_env = config
            .command_env
            .clone()
            .unwrap_or_else(|| config.env_policy().scrub(std::env::vars_os()));
        let output_root = OutputRoot::create(&config.temp_dir).unwrap_or_else(|error| {
            tracing::warn!(
                dir = %config.temp_dir.display(),
                %error,
                "cannot make a private directory for command output; output files will be unavailable"
            );
            OutputRoot::unavailable()
        });
        let output_root = Arc::new(output_root);
        // hotsh writes command output there and shows it: no confined command may.
        let mut trusted = config.trusted.clone();
        trusted.extend(output_root.path().map(|path| crate::sandbox::Trusted {
            path: path.to_owned(),
            kind: crate::sandbox::TrustedKind::Directory,
        }));
        let trusted = crate::sandbox::with_plugin_dirs(&config.plugin_dirs, trusted);
        let sandbox = Arc::new(Sandbox::detect(&config.sandbox, trusted));
        tracing::info!("{}", sandbox.describe());
        let executor_config = ExecutorConfig { bwrap: sandbox.backend.bwrap(), ..config.executor };
        let (executor, mut completions) = Executor::new(executor_config, command_env)?;
        let context = hotsh_abi::ToolsContext::new(sandbox.offered());
        let registry = Arc::new(Registry::new(
            config.plugin_dirs.clone(),
            context,
            config.data_dir.as_deref(),
        ));
        let runtime = tokio::runtime::Handle::current();
        // Watch first, then scan: a build that lands during the scan is not missed.
        let (changes, mut changed) = tokio::sync::mpsc::unbounded_channel();
        if let Err(error) = watch_plugin_dirs(Arc::clone(&registry), changes) {
            tracing::warn!(%error, "cannot watch the plugin directories; plugins will not reload");
        }
        let loading = Arc::clone(&registry);
        let warn_without_tools = config.warn_without_tools;
        runtime.spawn_blocking(move || {
            loading.load_all();
            if warn_without_tools && loading.snapshot().tool_definitions().is_empty() {
                tracing::warn!("{}", crate::plugins::no_tools_message(loading.dirs()));
            }
        });
        let recorder = config
            .record
            .as_deref()
            .map(|path| {
                crate::arc::Recorder::create(path, &config.plugin_dirs, &config.models.facts())
            })
            .transpose()?
            .map(Arc::new);
        let project_rules = crate::permissions::ProjectRules::new(config.data_dir.as_deref());
        let store = SessionStore::new(config.data_dir.clone());
        let mut hooks = crate::hooks::HookHost::new(
            Arc::clone(&executor) as _,
            Arc::clone(&sandbox),
            Arc::clone(&output_root),
            project_rules.clone(),
            config.claude_home.clone(),
            &config.hooks,
            store.clone(),
            Arc::clone(&registry),
        );
        hooks.configured_agents = config.agents.clone();
        let hooks = Arc::new(hooks);
        hooks.record_to(recorder.clone());
        if let Some(replay) = &config.hooks_replay {
            hooks.replay_from(replay);
        }
        let subagents = SubagentLimits {
            slots: Arc::new(tokio::sync::Semaphore::new(config.max_parallel)),
            max_depth: config.max_depth,
        };
        let host = Arc::new_cyclic(|me| Self {
            subagents,
            me: me.clone(),
            registry,
            executor,
            sandbox,
            models: Mutex::new(Arc::new(models)),
            remodel: config.remodel.clone(),
            transcript,
            output_root,
            runtime,
            sessions: Mutex::default(),
            store,
            project_rules,
            hooks,
            own_tools: OwnTools::default(),
            recorder,
            mcp_setup: config.mcp.clone(),
        });
        let weak = Arc::downgrade(&host);
        host.runtime.spawn(async move {
            while let Some(ended) = completions.recv().await {
                let Some(host) = weak.upgrade() else { return };
                let session =
                    ended.owner.as_ref().and_then(|owner| host.session(&SessionId(owner.clone())));
                match session {
                    Some(session) => {
                        let reported = host.executor.end_reported(&ended.id.0);
                        session.task_ended(ended, reported).await;
                    }
                    None => tracing::debug!(
                        task = %ended.id,
                        "task ended for a session that is gone; notice dropped"
                    ),
                }
            }
        });
        let weak = Arc::downgrade(&host);
        host.runtime.spawn(async move {
            while let Some(change) = changed.recv().await {
                let Some(host) = weak.upgrade() else { return };
                host.plugin_changed(&change).await;
            }
        });
        Ok(host)
    }

    /// Starts a new session in `cwd`: its log is created (and its first record on disk)
    /// before anything else, so a session that cannot be saved is refused.
    pub(crate) fn new_session(
        &self,
        cwd: PathBuf,
        parent: Option<crate::session::ParentLink>,
    ) -> Result<Arc<Session>, StoreError> {
        let id = uuid::Uuid::new_v4().to_string();
        let meta = SessionMeta {
            session_id: id.clone(),
            cwd: cwd.clone(),
            created_at: humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string(),
            agent: crate::version::version_line(),
            parent,
            forked_from: None,
        };
        let open = self.store.create(&meta)?;
        let session = Arc::new(Session::new(&meta, Box::new(LogWriter::start(open)), None));
        lock(&self.sessions).insert(session.id.clone(), Arc::clone(&session));
        self.hooks.opened(&session.id.0, "startup");
        Ok(session)
    }

    /// Forks session `source` into a new session in `cwd` ([`SessionStore::fork`]): what the
    /// source logged so far (written out first when it is open here) becomes the fork's
    /// history.
    pub(crate) async fn fork_session(
        &self,
        source: &SessionId,
        cwd: PathBuf,
    ) -> Result<Arc<Session>, hotsh_core::usecase::Refused> {
        if let Some(open) = self.session(source) {
            open.flush()
                .await
                .map_err(|failed| hotsh_core::usecase::Refused::NotSaved(failed.to_string()))?;
        }
        let meta = SessionMeta {
            session_id: uuid::Uuid::new_v4().to_string(),
            cwd,
            created_at: humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string(),
            agent: crate::version::version_line(),
            parent: None,
            forked_from: Some(source.0.clone()),
        };
        let store = self.store.clone();
        let from = source.0.clone();
        let (open, folded) =
            blocking(move || store.fork(&from, &meta)).await.map_err(|error| refused(&error))?;
        let session =
            Arc::new(Session::new(&folded.meta, Box::new(LogWriter::start(open)), Some(&folded)));
        lock(&self.sessions).insert(session.id.clone(), Arc::clone(&session));
        self.hooks.opened(&session.id.0, "startup");
        Ok(session)
    }

    /// Opens a session from its log (`session/load`, `session/resume`, `hotsh run --session`):
    /// one already open here is taken as it is; otherwise its log is locked, read and folded
    /// into a new `Session`. Returns the session and the fold (what the client saw, the
    /// tasks the log shows running: see [`Host::settle_tasks_of_gone_agent`]). `sink` is
    /// attached with live events held until [`Session::release_held`]: the caller sends the
    /// fold's view first.
    pub(crate) async fn open_session(
        &self,
        id: &str,
        sink: Arc<dyn EventSink>,
        thread: Option<hotsh_core::usecase::ThreadParts>,
    ) -> Result<(Arc<Session>, Folded), StoreError> {
        let store = self.store.clone();
        let owned = id.to_owned();
        if let Some(session) = self.session(&SessionId(id.to_owned())) {
            // Everything it did is in the log: read it back for the view, in the session's
            // order. Its running tasks are this process's own.
            let mut folded =
                session.attach_for_replay(sink, blocking(move || store.read(&owned))).await?;
            folded.open_tasks.clear();
            self.hooks.opened(&session.id.0, "resume");
            return Ok((session, folded));
        }
        let (open, folded) = blocking(move || store.open(&owned, thread)).await?;
        let session =
            Arc::new(Session::new(&folded.meta, Box::new(LogWriter::start(open)), Some(&folded)));
        session.attach_for_replay(sink, async { Ok::<_, StoreError>(()) }).await?;
        lock(&self.sessions).insert(session.id.clone(), Arc::clone(&session));
        self.hooks.opened(&session.id.0, "resume");
        Ok((session, folded))
    }

    /// Connects `session` to its MCP servers (the configured ones and the client's), in the
    /// background; servers it had before are closed first.
    pub(crate) fn connect_mcp(
        &self,
        session: &Arc<Session>,
        from_client: Vec<crate::mcp::ServerSpec>,
    ) {
        let specs = crate::mcp::merge(&self.mcp_setup.configured, from_client);
        let servers = (!specs.is_empty()).then(|| {
            crate::mcp::Servers::start(
                Arc::clone(session),
                Arc::clone(&self.executor),
                &self.mcp_setup,
                self.recorder.clone(),
                specs,
            )
        });
        let own: Vec<Arc<dyn hotsh_core::tools::ToolProvider>> = servers
            .map(|servers| Arc::new(crate::turn::McpTools(servers)) as _)
            .into_iter()
            .collect();
        self.set_own_tools(&session.id, own);
    }

    /// Gives a session its own tool providers (its MCP servers); those it had are closed.
    fn set_own_tools(&self, id: &SessionId, tools: Vec<Arc<dyn hotsh_core::tools::ToolProvider>>) {
        let previous = match tools.is_empty() {
            true => lock(&self.own_tools.0).remove(id),
            false => lock(&self.own_tools.0).insert(id.clone(), tools),
        };
        for provider in previous.into_iter().flatten() {
            provider.close();
        }
    }

    /// Closes a session open here ([`Session::close`]). False when it is not open here.
    pub(crate) async fn close_session(&self, id: &SessionId) -> bool {
        let Some(session) = lock(&self.sessions).remove(id) else {
            return false;
        };
        self.hooks.ended(&session, "other").await;
        self.set_own_tools(id, Vec::new());
        session.close(&*self.executor).await;
        true
    }

    /// Deletes session `id`: closed here first when it is open here, its log and output
    /// files removed. Refused while it has background tasks running, naming them, or a turn
    /// running, or while another hotsh has it open.
    pub(crate) async fn delete_session(
        &self,
        id: &SessionId,
    ) -> Result<(), hotsh_core::usecase::Refused> {
        use hotsh_core::usecase::Refused;
        let tasks = self.tasks_of(id);
        if !tasks.is_empty() {
            return Err(Refused::Invalid(format!(
                "session {id} has {} background task(s) running: {}; stop them (bash_kill) or wait for them to end, then delete it",
                tasks.len(),
                tasks.join(", ")
            )));
        }
        if let Some(session) = self.session(id) {
            if session.answering() {
                return Err(Refused::Busy(format!(
                    "session {id} is answering a prompt; cancel it first"
                )));
            }
            self.close_session(id).await;
        }
        let store = self.store.clone();
        let owned = id.0.clone();
        blocking(move || store.delete(&owned)).await.map_err(|error| refused(&error))?;
        self.output_root.remove_session(&id.0);
        Ok(())
    }

    /// The sessions in the data directory.
    pub(crate) async fn list_sessions(
        &self,
        cwd: Option<PathBuf>,
    ) -> Result<Vec<crate::session::store::Summary>, StoreError> {
        let store = self.store.clone();
        blocking(move || store.list(cwd.as_deref())).await
    }

    /// The background tasks `id` runs now, each as `ID (its command's first line)`.
    pub(crate) fn tasks_of(&self, id: &SessionId) -> Vec<String> {
        self.executor
            .running_owned_by(&id.0)
            .iter()
            .map(|task| {
                format!("{} ({})", task.id, task.command.lines().next().unwrap_or_default())
            })
            .collect()
    }

    /// Where session `id`'s log is.
    pub(crate) fn log_path(&self, id: &SessionId) -> Option<String> {
        self.store.path_of(&id.0).ok().map(|path| path.display().to_string())
    }

    pub(crate) fn session(&self, id: &SessionId) -> Option<Arc<Session>> {
        lock(&self.sessions).get(id).cloned()
    }

    /// The name of the model `session` uses: its own choice when this host offers it, else
    /// the default. A turn uses this one ([`Host::turn`]), so it uses exactly what is shown.
    pub(crate) fn model_name_of(&self, session: &Session) -> String {
        self.offered_model(session.model_choice().as_deref()).name.clone()
    }

    fn offered_model(&self, chosen: Option<&str>) -> Offered {
        let models = Arc::clone(&lock(&self.models));
        chosen
            .and_then(|name| models.offered.iter().find(|m| m.name == name))
            .unwrap_or(&models.offered[0])
            .clone()
    }

    /// Whether the default model cannot answer until the user gives a key.
    pub(crate) fn needs_key(&self) -> bool {
        lock(&self.models).needs_key
    }

    /// Resolves the models again, with the key `hotsh login` stored now (or without the one
    /// it removed): sessions' next turns use them. Whether the default model still needs a
    /// key.
    pub(crate) fn reload_models(&self) -> Result<bool, String> {
        let Some(remodel) = &self.remodel else { return Ok(self.needs_key()) };
        let choices = (remodel.0)()?;
        let models = Models::offer(&choices).map_err(|error| format!("{error:#}"))?;
        let needs_key = models.needs_key;
        *lock(&self.models) = Arc::new(models);
        Ok(needs_key)
    }

    /// The context window of the model `session` uses now.
    pub(crate) fn window_of(&self, session: &Session) -> u64 {
        self.offered_model(session.model_choice().as_deref()).limits.window
    }

    /// A session opened here chose a model this host does not offer (its configuration
    /// changed, or that model's key is not set): it says, in the thread, which one it uses
    /// now. The choice itself stays in the log (a hotsh that offers it again uses it).
    pub(crate) async fn note_a_model_that_is_gone(&self, session: &Session) {
        let Some(chosen) = session.model_choice() else { return };
        let now = self.model_name_of(session);
        if now == chosen {
            return;
        }
        session
            .emit(SessionEvent::HostNote {
                call_id: session.next_call_id(),
                title: format!("Model {chosen} is not available here: this session uses {now}"),
                detail: format!(
                    "This session chose the model `{chosen}`, which this hotsh does not offer (its configuration changed, or the model's key is not set). Its turns now go to `{now}`; choose another in the model menu."
                ),
            })
            .await;
        session.flush_or_warn().await;
    }

    /// Whether a model on offer takes images in prompts.
    pub(crate) fn takes_images(&self) -> bool {
        lock(&self.models).takes_images
    }

    /// The models offered: (name, description), the default first.
    pub(crate) fn model_names(&self) -> Vec<(String, String)> {
        lock(&self.models)
            .offered
            .iter()
            .map(|offered| (offered.name.clone(), offered.description.clone()))
            .collect()
    }

    /// What a turn of `session` works with: its model, its tool providers (the plugins, then
    /// its MCP servers) and the host's ports.
    /// The reasoning-effort levels of the model `session` uses (empty: no choice).
    pub(crate) fn efforts_of(&self, session: &Session) -> Vec<String> {
        self.offered_model(session.model_choice().as_deref()).efforts.clone()
    }

    /// The effort `session`'s requests carry: its choice when its model offers that level,
    /// else the model's default (none for a model without levels).
    pub(crate) fn effort_of(&self, session: &Session) -> Option<String> {
        let offered = self.offered_model(session.model_choice().as_deref());
        session
            .effort_choice()
            .filter(|chosen| offered.efforts.contains(chosen))
            .or_else(|| offered.default_effort.clone())
    }

    /// What `/permissions ARGS` answers in `session`: the rules that apply to it, numbered
    /// (the session's, then its project's), or, with `remove N`, the Nth removed.
    pub(crate) async fn permissions_command(
        &self,
        session: &Session,
        args: Option<&str>,
    ) -> String {
        let own = session.rules();
        let project = self.project_rules.of(&session.cwd);
        let words: Vec<&str> = args.unwrap_or_default().split_whitespace().collect();
        match words.as_slice() {
            [] | ["list"] => permissions_list(&session.cwd, &own, &project),
            ["remove", n] => {
                let Some(index) = n.parse::<usize>().ok().filter(|n| *n >= 1) else {
                    return format!("`{n}` is not a rule's number: `/permissions` lists them.");
                };
                if let Some(rule) = own.get(index - 1) {
                    session.remove_rule(rule).await;
                    return format!("Removed from this session: {}.", rule.describe());
                }
                let Some(rule) = project.get(index - 1 - own.len()) else {
                    return format!(
                        "There is no rule {index}: `/permissions` lists {}.",
                        own.len() + project.len()
                    );
                };
                match self.project_rules.remove(&session.cwd, rule) {
                    Ok(_) => format!("Removed from this project: {}.", rule.describe()),
                    Err(error) => format!("The rule could not be removed: {error:#}."),
                }
            }
            _ => {
                "`/permissions` lists the rules; `/permissions remove N` removes rule N.".to_owned()
            }
        }
    }

    /// Starts `session`'s sandbox environment for its mode in the background, so that its
    /// first command does not wait for it (`executor/environment.rs`); nothing when it is up.
    /// Called when a turn begins (the model's first answer takes far longer than a bubblewrap
    /// start) and when the session's sandbox mode changes; never when a session is only
    /// opened, so a client that opens many sessions starts no process for them.
    pub(crate) fn prepare_sandbox(&self, session: &Arc<Session>) {
        let call = crate::plugins::gate::CallSandbox::of_session(
            &self.sandbox,
            session,
            String::new(),
            &self.output_root,
            &self.project_rules,
        );
        let (executor, owner) = (Arc::clone(&self.executor), session.id.0.clone());
        tokio::spawn(async move {
            // Once the answer is on its way: the start is a fork and a bubblewrap, which
            // would share the two cores with writing it.
            tokio::time::sleep(PREPARE_AFTER).await;
            let _ = tokio::task::spawn_blocking(move || {
                // A session whose folder is gone (a loaded one, say) has no sandbox to start;
                // its first command says why it cannot run.
                if !call.cwd.is_dir() {
                    let cwd = call.cwd.display();
                    tracing::info!(session = owner, %cwd, "the session's folder is gone; no sandbox started for it");
                    return;
                }
                if let Some(policy) = call.standing_policy() {
                    executor.prepare(&owner, &policy);
                }
            })
            .await;
        });
    }

    pub(crate) fn turn(&self, session: &Session) -> crate::turn::Turn {
        let hooks = self.hooks.for_turn(session);
        let offered = self.offered_model(session.model_choice().as_deref());
        let plugins = crate::turn::PluginTools {
            registry: Arc::clone(&self.registry),
            executor: Arc::clone(&self.executor) as _,
            live_cap: self.executor.config().live_cap,
            sandbox: Arc::clone(&self.sandbox),
            runtime: self.runtime.clone(),
            output_dir: self.output_root.session_dir(&session.id.0),
            temp: SessionTemp::new(&self.output_root, &session.id.0),
            project_rules: self.project_rules.clone(),
            hooks: Arc::clone(&hooks),
        };
        let mut providers: Vec<Arc<dyn hotsh_core::tools::ToolProvider>> =
            vec![Arc::new(plugins), Arc::new(hotsh_core::plan::PlanTool)];
        providers.extend(lock(&self.own_tools.0).get(&session.id).cloned().unwrap_or_default());
        let depth = session.parent.as_ref().map_or(0, |parent| parent.depth);
        if let Some(host) = self.me.upgrade()
            && depth < self.subagents.max_depth
        {
            providers.push(Arc::new(crate::subagents::SubagentTool {
                host,
                session: session.id.clone(),
                depth,
                hooks: Arc::clone(&hooks),
            }));
        }
        let mut tools = hotsh_core::tools::ToolRouter::new(providers, self.sandbox.confines())
            .with_command_hooks(Arc::clone(&hooks) as _);
        if let Some(only) = session.parent.as_ref().and_then(|parent| parent.tools.clone()) {
            tools = tools.with_only(only);
        }
        crate::turn::Turn {
            model: Arc::clone(&offered.model),
            limits: offered.limits,
            effort: self.effort_of(session),
            price: offered.price.clone(),
            tools,
            hooks,
            ports: Arc::new(crate::turn::HostPorts {
                executor: Arc::clone(&self.executor) as _,
                cwd: session.cwd.clone(),
                started: session.created_at.clone(),
                session_id: session.id.0.clone(),
                transcript: self.transcript.clone(),
                recorder: self.recorder.clone(),
                subagent: session.parent.as_ref().map(crate::prompt::subagent_part),
            }),
        }
    }

    /// Stops every background task, closes every session's log and removes this process's
    /// output files.
    pub(crate) async fn shutdown(&self) {
        let open: Vec<Arc<Session>> = lock(&self.sessions).values().cloned().collect();
        // A running turn is cancelled (logged as such) and given a moment to end: its commands
        // end as cancelled, not killed, and it asks the model nothing more once the client is
        // gone. One that does not end in time is cut off by what follows.
        let mut cancelled = Vec::new();
        for session in &open {
            if session.cancel_turn().await {
                cancelled.push(Arc::clone(session));
            }
        }
        let ended = futures::future::join_all(cancelled.iter().map(|s| s.no_turn()));
        if tokio::time::timeout(TURN_END_ON_EXIT, ended).await.is_err() {
            tracing::warn!("a cancelled turn did not end in time; stopping anyway");
        }
        self.hooks.ended_all(&open, "prompt_input_exit").await;
        for session in &open {
            self.set_own_tools(&session.id, Vec::new());
        }
        self.executor.dispose().await;
        let sessions: Vec<Arc<Session>> = lock(&self.sessions).drain().map(|(_, s)| s).collect();
        // Together: an idle log closes where its writer runs, the others write on the
        // blocking pool.
        futures::future::join_all(sessions.iter().map(|session| session.close_log())).await;
        self.output_root.remove();
    }

    /// The session's commands were narrowed (plan mode, a narrower sandbox mode): the
    /// background tasks still running under a wider mode are named
    /// ([`Session::tell_of_tasks_that_keep_writing`]).
    pub(crate) async fn narrowed(&self, session: &Session, narrowing: Narrowing) {
        session.tell_of_tasks_that_keep_writing(&*self.executor, narrowing).await;
    }

    /// Tells every session's client that a plugin was reloaded, rejected or unloaded.
    async fn plugin_changed(&self, change: &PluginChange) {
        let (title, detail, failed) = describe_change(change);
        if let (Some(recorder), PluginChange::Loaded { plugin, replaced: Some(_) }) =
            (&self.recorder, change)
            && let Some(file) = plugin.path.file_name()
        {
            recorder.step(&serde_json::json!({"reload_plugin": file.to_string_lossy()}));
        }
        let sessions: Vec<Arc<Session>> = lock(&self.sessions).values().cloned().collect();
        for session in sessions {
            session
                .emit(SessionEvent::PluginChanged {
                    call_id: session.next_call_id(),
                    title: title.clone(),
                    detail: detail.clone(),
                    failed,
                })
                .await;
        }
    }
}

/// Runs store work (file reads) on the blocking pool.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    tokio::task::spawn_blocking(work).await.unwrap_or_else(|join| {
        Err(StoreError::Read(crate::session::log::ReadError::Io {
            path: PathBuf::new(),
            source: std::io::Error::other(join),
        }))
    })
}

/// A plugin change as the user sees it: title, detail, and whether it is a failure.
fn describe_change(change: &PluginChange) -> (String, String, bool) {
    match change {
        PluginChange::Loaded { plugin, replaced: Some(old) } => (
            format!("Plugin {} reloaded: build {} now serves", plugin.name, plugin.generation),
            format!(
                "{} (hash {:016x}, loaded in {:.1} ms at {}) replaces build {}; calls already running finish on {}.",
                plugin.path.display(),
                plugin.content_hash,
                plugin.load_took.as_secs_f64() * 1000.0,
                unix_seconds(plugin.loaded_at),
                old.generation,
                old.generation
            ),
            false,
        ),
        PluginChange::Loaded { plugin, replaced: None } => (
            format!("Plugin {} loaded (build {})", plugin.name, plugin.generation),
            format!(
                "{} (hash {:016x}); tools: {}.",
                plugin.path.display(),
                plugin.content_hash,
                plugin.tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>().join(", ")
            ),
            false,
        ),
        PluginChange::Rejected { path, reason, serving } => {
            let name = path
                .file_name()
                .map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
            let still = match serving {
                Some(plugin) => {
                    format!("Build {} of plugin {} keeps serving.", plugin.generation, plugin.name)
                }
                None => "Nothing was loaded from this file.".to_owned(),
            };
            (format!("Plugin build rejected: {name}"), format!("{reason}\n\n{still}"), true)
        }
        PluginChange::Removed { plugin } => (
            format!("Plugin {} unloaded (build {})", plugin.name, plugin.generation),
            format!("{} was removed; calls already running finish.", plugin.path.display()),
            false,
        ),
    }
}

/// A time as seconds since the Unix epoch (with milliseconds), for cards and logs.
fn unix_seconds(at: std::time::SystemTime) -> String {
    let since = at.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    format!("{}.{:03}", since.as_secs(), since.subsec_millis())
}

/// The text of `/permissions`: the session's rules, then the project's, numbered in one list.
fn permissions_list(
    cwd: &std::path::Path,
    own: &[hotsh_core::permissions::Rule],
    project: &[hotsh_core::permissions::Rule],
) -> String {
    if own.is_empty() && project.is_empty() {
        return "No permission rules apply here. A rule is added when a call asks for a wider \
                sandbox mode and you choose \"Allow … for this session\" or \"Always allow … in \
                this project\"; the calls it covers then run under that mode without asking."
            .to_owned();
    }
    let mut text = String::new();
    let mut number = 0;
    for (heading, rules) in [
        ("This session".to_owned(), own),
        (format!("This project (`{}`, kept in hotsh's data directory)", cwd.display()), project),
    ] {
        if rules.is_empty() {
            continue;
        }
        text.push_str(&format!("{heading}:\n\n"));
        for rule in rules {
            number += 1;
            text.push_str(&format!("{number}. {}\n", rule.describe()));
        }
        text.push('\n');
    }
    text.push_str("Remove one with `/permissions remove N`.");
    text
}

/// The host as the use cases' port (`hotsh_core::usecase`).
impl hotsh_core::usecase::Backend for Host {
    fn turn(&self, session: &Session) -> hotsh_core::turn::Turn {
        Host::turn(self, session)
    }

    fn prepare(&self, session: &Arc<Session>) {
        self.prepare_sandbox(session);
    }

    fn answer_command<'a>(
        &'a self,
        session: &'a Arc<Session>,
        command: &'a hotsh_core::commands::SlashCommand,
    ) -> futures::future::BoxFuture<'a, String> {
        use hotsh_core::commands::SlashCommand;
        Box::pin(async move {
            match command {
                SlashCommand::Permissions { args } => {
                    self.permissions_command(session, args.as_deref()).await
                }
                SlashCommand::Hooks => self.hooks.listing(session),
                // Commands the model answers never come here.
                SlashCommand::Compact { .. } | SlashCommand::Init { .. } => String::new(),
            }
        })
    }

    fn narrowed<'a>(
        &'a self,
        session: &'a Session,
        narrowing: Narrowing,
    ) -> futures::future::BoxFuture<'a, ()> {
        Box::pin(Host::narrowed(self, session, narrowing))
    }

    fn offer(&self, session: &Session) -> hotsh_core::usecase::Offer {
        // A subagent may not go wider than its parent was when it started it.
        let inherited = session.parent.as_ref().and_then(|parent| parent.max_mode);
        let max_mode = match (self.sandbox.max_mode, inherited) {
            (Some(own), Some(parent)) => Some(own.min(parent)),
            (own, parent) => own.or(parent),
        };
        hotsh_core::usecase::Offer {
            models: self.model_names().into_iter().map(|(name, _)| name).collect(),
            efforts: self.efforts_of(session),
            sandbox: self.sandbox.offered(),
            max_mode,
        }
    }

    fn sandbox_mode(&self, session: &Session) -> crate::sandbox::Mode {
        session.sandbox_choice().unwrap_or(self.sandbox.default_mode)
    }

    fn reopened<'a>(&'a self, session: &'a Session) -> futures::future::BoxFuture<'a, ()> {
        Box::pin(self.note_a_model_that_is_gone(session))
    }

    fn create(
        &self,
        cwd: PathBuf,
        parent: Option<crate::session::ParentLink>,
    ) -> Result<Arc<Session>, hotsh_core::usecase::Refused> {
        self.new_session(cwd, parent).map_err(|error| refused(&error))
    }

    fn open<'a>(
        &'a self,
        id: &'a str,
        sink: Arc<dyn EventSink>,
        thread: Option<hotsh_core::usecase::ThreadParts>,
    ) -> futures::future::BoxFuture<'a, Result<(Arc<Session>, Folded), hotsh_core::usecase::Refused>>
    {
        Box::pin(async move {
            self.open_session(id, sink, thread).await.map_err(|error| refused(&error))
        })
    }

    fn presenter(
        &self,
        id: &SessionId,
        cwd: &std::path::Path,
    ) -> Box<dyn hotsh_core::usecase::Presenter> {
        Box::new(crate::turn::Presenter::new(&self.registry, id, cwd))
    }

    fn fork<'a>(
        &'a self,
        id: &'a SessionId,
        cwd: PathBuf,
    ) -> futures::future::BoxFuture<'a, Result<Arc<Session>, hotsh_core::usecase::Refused>> {
        Box::pin(self.fork_session(id, cwd))
    }

    fn thread<'a>(
        &'a self,
        id: &'a SessionId,
    ) -> futures::future::BoxFuture<'a, Result<Vec<SessionEvent>, hotsh_core::usecase::Refused>>
    {
        Box::pin(async move {
            let store = self.store.clone();
            let owned = id.0.clone();
            let folded = blocking(move || store.read(&owned)).await.map_err(|e| refused(&e))?;
            let mut presenter = crate::turn::Presenter::new(&self.registry, id, &folded.meta.cwd);
            Ok(presenter.draw(folded.view).await)
        })
    }

    fn close<'a>(&'a self, id: &'a SessionId) -> futures::future::BoxFuture<'a, bool> {
        Box::pin(self.close_session(id))
    }

    fn delete<'a>(
        &'a self,
        id: &'a SessionId,
    ) -> futures::future::BoxFuture<'a, Result<(), hotsh_core::usecase::Refused>> {
        Box::pin(self.delete_session(id))
    }
}

/// A session store failure as a use case's refusal: an unknown session is the request's
/// mistake; anything else says what failed, naming the file.
fn refused(error: &StoreError) -> hotsh_core::usecase::Refused {
    match error {
        StoreError::Unknown(_) => hotsh_core::usecase::Refused::Invalid(error.to_string()),
        _ => hotsh_core::usecase::Refused::Failed(error.to_string()),
    }
}
