//! The host: owner of every long-lived resource (sessions, plugins, the executor, the model).

use crate::executor::{EnvPolicy, Executor, ExecutorConfig};
use crate::model::{self, Model, ModelSpec, Transcript};
use crate::plugins::Registry;
use crate::session::{Session, SessionId, lock};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// How the agent is set up (from the command line).
#[derive(Debug, Clone)]
pub(crate) struct HostConfig {
    pub(crate) model: ModelSpec,
    pub(crate) plugin_dirs: Vec<PathBuf>,
    pub(crate) model_transcript: Option<PathBuf>,
    pub(crate) executor: ExecutorConfig,
    /// Per-session directories of spill files live here.
    pub(crate) spill_root: PathBuf,
}

#[derive(Debug)]
pub(crate) struct Host {
    pub(crate) registry: Arc<Registry>,
    pub(crate) executor: Arc<Executor>,
    pub(crate) model: Box<dyn Model>,
    pub(crate) transcript: Option<Transcript>,
    pub(crate) spill_root: PathBuf,
    pub(crate) runtime: tokio::runtime::Handle,
    sessions: Mutex<HashMap<SessionId, Arc<Session>>>,
}

/// Variables that hold model credentials; commands never see them (nor copies of their values).
const MODEL_SECRETS: &[&str] = &[
    "DEEPSEEK_API_KEY",
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "HOTSH_API_KEY",
];

impl Host {
    /// Builds the host and starts loading plugins in the background: the agent answers
    /// `initialize` at once, and the first turn waits for the scan to finish.
    pub(crate) fn start(config: HostConfig) -> anyhow::Result<Arc<Self>> {
        let model = model::open(&config.model)?;
        let transcript = config
            .model_transcript
            .as_deref()
            .map(Transcript::create)
            .transpose()?;
        let env_policy = EnvPolicy {
            host_secrets: MODEL_SECRETS.iter().map(|s| (*s).to_owned()).collect(),
            ..EnvPolicy::default()
        };
        let scratch = std::env::temp_dir().join("hotsh-plugin-copies");
        let registry = Arc::new(Registry::new(scratch));
        let runtime = tokio::runtime::Handle::current();
        let loading = Arc::clone(&registry);
        let dirs = config.plugin_dirs.clone();
        runtime.spawn_blocking(move || loading.load_dirs(&dirs));
        Ok(Arc::new(Self {
            registry,
            executor: Arc::new(Executor::new(config.executor, &env_policy)),
            model,
            transcript,
            spill_root: config.spill_root,
            runtime,
            sessions: Mutex::default(),
        }))
    }

    pub(crate) fn new_session(&self, cwd: PathBuf) -> Arc<Session> {
        let id = SessionId(uuid::Uuid::new_v4().to_string());
        let session = Arc::new(Session::new(id.clone(), cwd));
        lock(&self.sessions).insert(id, Arc::clone(&session));
        session
    }

    pub(crate) fn session(&self, id: &SessionId) -> Option<Arc<Session>> {
        lock(&self.sessions).get(id).cloned()
    }
}
