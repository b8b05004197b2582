//! The command line: `hotsh [acp]`, `hotsh run`, `hotsh dev`, `hotsh plugin check`,
//! `hotsh install`, `hotsh replay`, `hotsh sandbox`.

use crate::config::ConfigFile;
use crate::host::{Host, HostConfig};
use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

/// `0.1.0 (commit 1a2b3c4d5e6f)`.
use crate::version::VERSION;

#[derive(Debug, Parser)]
#[command(
    name = "hotsh",
    version = VERSION,
    about = "A coding agent for the Agent Client Protocol. Without a subcommand it serves ACP \
             on stdin/stdout, as `hotsh acp` does.",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(flatten)]
    agent: AgentArgs,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve ACP on stdin/stdout (what an editor such as Zed launches). The default.
    Acp(AgentArgs),
    /// Run one prompt in this terminal and show what a user of an ACP client would see.
    Run {
        #[command(flatten)]
        agent: AgentArgs,
        /// Working directory of the session (default: the current directory).
        #[arg(long, conflicts_with = "session")]
        cwd: Option<PathBuf>,
        /// Continue this session (see `hotsh sessions list`) instead of starting a new one.
        #[arg(long, value_name = "ID")]
        session: Option<String>,
        /// The session's sandbox mode from now on (`read-only`, `workspace-write` or
        /// `danger-full-access`), chosen as a client would: logged with the session, so a
        /// `--session` continuing it keeps it. Default: the session's own choice, else the
        /// configuration file's `[sandbox] mode`.
        #[arg(long, value_name = "MODE", value_parser = ["read-only", "workspace-write", "danger-full-access"])]
        sandbox: Option<String>,
        /// The prompt.
        prompt: String,
    },
    /// The sessions saved in the data directory.
    Sessions {
        #[command(subcommand)]
        command: SessionsCommand,
        /// The data directory (default: `$HOTSH_DATA_DIR`, `$XDG_DATA_HOME/hotsh` or
        /// `~/.local/share/hotsh`).
        #[arg(long, value_name = "DIR", global = true)]
        data_dir: Option<PathBuf>,
    },
    /// Rebuild a plugin crate whenever its sources change (`cargo build` in CRATE_DIR, with
    /// the arguments after `--`), check each build as a running agent would, and say whether
    /// it was accepted.
    Dev {
        /// The plugin crate's directory.
        #[arg(default_value = ".")]
        crate_dir: PathBuf,
        /// Extra arguments for `cargo build`, after `--`.
        #[arg(last = true)]
        cargo_args: Vec<String>,
    },
    /// Replay recorded arcs (`--record`, `hotsh sessions export`) against this hotsh and its
    /// plugins, offline, and say which drifted from what they expect (exit status 1 if any).
    Replay {
        /// Arc files, or directories whose `*.arc` files are replayed.
        #[arg(required = true, value_name = "ARC")]
        arcs: Vec<PathBuf>,
        /// A directory of plugins to replay with (repeatable); as for `hotsh acp`.
        #[arg(long = "plugin-dir", value_name = "DIR")]
        plugin_dirs: Vec<PathBuf>,
        /// Replay with the `--plugin-dir` plugins only.
        #[arg(long)]
        no_default_plugins: bool,
        /// Rewrite what drifted arcs expect with what the agent sent this time.
        #[arg(long)]
        bless: bool,
        /// Write a JUnit XML report to FILE.
        #[arg(long, value_name = "FILE")]
        junit: Option<PathBuf>,
        /// The longest one arc may take (default: the arc's `timeout_s`, else 60).
        #[arg(long, value_name = "SECONDS")]
        timeout: Option<u64>,
        /// The widest sandbox mode a replayed command may run under, whatever the arc asks for
        /// (read-only, workspace-write, danger-full-access).
        #[arg(long, value_name = "MODE", default_value = "workspace-write")]
        sandbox: String,
    },
    /// Work with plugin files.
    Plugin {
        #[command(subcommand)]
        command: PluginCommand,
    },
    /// Install this hotsh and the plugins beside it for the current user: the executable to
    /// `~/.local/bin`, the plugins to `<data dir>/plugins`, where every hotsh looks for them.
    Install {
        /// Where the executable goes (default: `~/.local/bin`).
        #[arg(long, value_name = "DIR")]
        bin_dir: Option<PathBuf>,
        /// The data directory (default: `$HOTSH_DATA_DIR`, `$XDG_DATA_HOME/hotsh` or
        /// `~/.local/share/hotsh`).
        #[arg(long, value_name = "DIR")]
        data_dir: Option<PathBuf>,
    },
    /// What the sandbox gives commands on this machine, as an agent with these options sets
    /// it up: the backend, and for each mode what a command in the folder may write, what
    /// stays read-only there, the network and what is not enforced (exit status 1 when
    /// confined commands cannot run here).
    Sandbox {
        /// The session's folder (default: the current directory).
        #[arg(long, value_name = "DIR")]
        cwd: Option<PathBuf>,
        /// The configuration file (TOML), as for `hotsh acp`.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// The data directory, as for `hotsh acp`.
        #[arg(long, value_name = "DIR")]
        data_dir: Option<PathBuf>,
        /// A directory of plugins (repeatable), as for `hotsh acp`: read-only to commands.
        #[arg(long = "plugin-dir", value_name = "DIR")]
        plugin_dirs: Vec<PathBuf>,
        /// Only the `--plugin-dir` directories, as for `hotsh acp`.
        #[arg(long)]
        no_default_plugins: bool,
    },
    /// Store a model key for hotsh (asked for in this terminal, never shown): which provider,
    /// then the key, checked with one request when the network allows. Kept 0600 in hotsh's
    /// configuration directory, where commands hotsh runs cannot read it; a key in the
    /// environment still wins.
    Login {
        /// Say which key the model would use and where it comes from (never the key).
        #[arg(long)]
        status: bool,
        /// Keep the key in the Secret Service keyring (GNOME Keyring, KWallet…) instead of
        /// the file; the file then only says which provider it is for.
        #[arg(long, conflicts_with = "status")]
        keyring: bool,
        #[command(flatten)]
        agent: AgentArgs,
    },
    /// Remove the key `hotsh login` stored.
    Logout,
    /// Load a plugin build in a throwaway process and report on it (internal).
    #[command(name = "__check-plugin", hide = true)]
    CheckPluginChild { path: PathBuf },
}

#[derive(Debug, Subcommand)]
enum SessionsCommand {
    /// One line per session, newest first: id, last update, working directory, title.
    List {
        /// Only the sessions of this working directory.
        #[arg(long)]
        cwd: Option<PathBuf>,
    },
    /// The thread of a session as readable text: prompts, replies, commands with their output
    /// and exit status.
    Show {
        /// The session's id.
        id: String,
    },
    /// Make an arc of a session (for `hotsh replay`): its prompts and model answers from the
    /// log, and what this hotsh sends for them, taken from a replay.
    Export {
        /// The session's id.
        id: String,
        /// Where the arc goes.
        #[arg(long, value_name = "FILE")]
        arc: PathBuf,
        /// A directory of plugins to replay with (repeatable); as for `hotsh acp`.
        #[arg(long = "plugin-dir", value_name = "DIR")]
        plugin_dirs: Vec<PathBuf>,
        /// Replay with the `--plugin-dir` plugins only.
        #[arg(long)]
        no_default_plugins: bool,
    },
}

#[derive(Debug, Subcommand)]
enum PluginCommand {
    /// Load a plugin file the way the agent does (in a throwaway process) and describe it, or
    /// say why it is rejected (exit status 1).
    Check {
        /// The plugin library, e.g. target/debug/libmy_plugin.so.
        path: PathBuf,
    },
}

/// How the agent is set up; the same for every subcommand that runs it.
#[derive(Debug, Args, Default)]
struct AgentArgs {
    /// The model: `openai:NAME` (an OpenAI-compatible server: DeepSeek, OpenAI, OpenRouter,
    /// Ollama, …), a profile (`deepseek`, `openai`, or the configuration file's), `script:PATH`
    /// (plays a JSON script of responses, see the README) or `none`. Default: `$HOTSH_MODEL`,
    /// the configuration file's `model`, `deepseek` when `DEEPSEEK_API_KEY` is set, `openai`
    /// when `OPENAI_API_KEY` is; else none.
    #[arg(long, value_name = "MODEL")]
    model: Option<String>,
    /// The model server's base URL (default: `$HOTSH_BASE_URL`, the profile's, or
    /// `https://api.openai.com/v1`).
    #[arg(long, value_name = "URL")]
    base_url: Option<String>,
    /// Another directory to load plugins from (repeatable). It comes before the default
    /// directories (the executable's directory and `<data dir>/plugins`), so a build of yours
    /// wins over an installed plugin of the same name.
    #[arg(long = "plugin-dir", value_name = "DIR")]
    plugin_dirs: Vec<PathBuf>,
    /// Load plugins only from the `--plugin-dir` directories.
    #[arg(long)]
    no_default_plugins: bool,
    /// The data directory (default: `$HOTSH_DATA_DIR`, `$XDG_DATA_HOME/hotsh` or
    /// `~/.local/share/hotsh`).
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Append every model request, as one JSON line, to FILE.
    #[arg(long, value_name = "FILE")]
    model_transcript: Option<PathBuf>,
    /// Record an arc of everything the client and the model send and receive, to replay it
    /// later with `hotsh replay` (default: the configuration file's `record`).
    #[arg(long, value_name = "FILE")]
    record: Option<PathBuf>,
    /// Serve MCP servers from the answers an arc recorded (`hotsh replay` uses it), instead
    /// of starting or reaching them.
    #[arg(long, value_name = "FILE", hide = true)]
    mcp_replay: Option<PathBuf>,
    /// Run the hooks an arc recorded for each turn (`hotsh replay` uses it), instead of those
    /// of the settings files.
    #[arg(long, value_name = "FILE", hide = true)]
    hooks_replay: Option<PathBuf>,
    /// A scripted model plays the models this JSON tells of (an arc's `recorded_model`):
    /// `hotsh replay` uses it.
    #[arg(long, value_name = "JSON", hide = true)]
    model_facts: Option<String>,
    /// The configuration file (TOML). Default: `$XDG_CONFIG_HOME/hotsh/config.toml` (or
    /// `~/.config/hotsh/config.toml`), if it exists.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
}

impl AgentArgs {
    /// The plugin directories in load order: `--plugin-dir`s as given, then (unless
    /// `--no-default-plugins`) the executable's directory and the user's plugin directory.
    fn plugin_dirs(&self) -> anyhow::Result<Vec<PathBuf>> {
        let mut dirs = Vec::new();
        for dir in &self.plugin_dirs {
            dirs.push(
                std::path::absolute(dir)
                    .with_context(|| format!("cannot resolve --plugin-dir {}", dir.display()))?,
            );
        }
        if !self.no_default_plugins {
            dirs.push(crate::dirs::executable_dir()?);
            if let Some(data) = crate::dirs::data_dir(self.data_dir.as_deref()) {
                dirs.push(crate::dirs::user_plugin_dir(&data));
            }
        }
        let mut seen = std::collections::HashSet::new();
        dirs.retain(|dir| seen.insert(dir.canonicalize().unwrap_or_else(|_| dir.clone())));
        Ok(dirs)
    }

    fn into_config(self) -> anyhow::Result<HostConfig> {
        let plugin_dirs = self.plugin_dirs()?;
        let data_dir = crate::dirs::data_dir(self.data_dir.as_deref());
        let trusted = self.trusted(data_dir.clone());
        let file = ConfigFile::load(self.config.as_deref())?;
        let flags = crate::model::setup::ModelFlags { model: self.model, base_url: self.base_url };
        let mut models =
            crate::model::setup::resolve(&flags, &file, &crate::credentials::environment())
                .map_err(anyhow::Error::msg)?;
        // The models follow the stored key (`authenticate`, ACP `logout`), unless a replay
        // plays recorded ones.
        let remodel = match &self.model_facts {
            Some(facts) => {
                let facts = serde_json::from_str(facts).context("--model-facts is not valid")?;
                models.play_as(&facts);
                None
            }
            None => {
                let (flags, file) = (flags.clone(), file.clone());
                Some(crate::host::Remodel(std::sync::Arc::new(move || {
                    crate::model::setup::resolve(&flags, &file, &crate::credentials::environment())
                })))
            }
        };
        let mut config = HostConfig::new(models, plugin_dirs, file)?;
        config.remodel = remodel;
        config.model_transcript = self.model_transcript;
        config.record = self.record.or(config.record);
        if let Some(path) = &self.mcp_replay {
            config.mcp.replay = Some(std::sync::Arc::new(crate::mcp::Recording::load(path)?));
        }
        if let Some(path) = &self.hooks_replay {
            let text =
                std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
            config.hooks_replay =
                Some(serde_json::from_slice(&text).context("--hooks-replay is not valid")?);
        }
        config.data_dir = data_dir;
        config.trusted = trusted;
        Ok(config)
    }

    /// What is read-only to every confined command besides the plugin directories (which the
    /// host adds): every place this or a later hotsh of this user reads its configuration,
    /// plugins, sessions or program from, whichever flags this one was started with (the
    /// data directories, the configuration file and directories, hotsh's own directory, the
    /// installed executables). The one list the policy and `hotsh sandbox` share.
    fn trusted(&self, data_dir: Option<PathBuf>) -> Vec<crate::sandbox::Trusted> {
        use crate::sandbox::{Trusted, TrustedKind};
        let directory = |path: PathBuf| Trusted { path, kind: TrustedKind::Directory };
        let file = |path: PathBuf| Trusted { path, kind: TrustedKind::File };
        crate::dirs::every_data_dir(data_dir.as_deref())
            .into_iter()
            .map(directory)
            .chain(crate::config::trusted(self.config.as_deref()))
            .chain(crate::dirs::executable_dir().ok().map(directory))
            .chain(crate::dirs::installed_executables().into_iter().map(file))
            .collect()
    }

    /// `hotsh sandbox`: the sandbox an agent with these options sets up, for a session in
    /// `cwd`.
    fn sandbox_report(self, cwd: Option<PathBuf>) -> anyhow::Result<ExitCode> {
        let file = ConfigFile::load(self.config.as_deref())?;
        let data_dir = crate::dirs::data_dir(self.data_dir.as_deref());
        let trusted =
            crate::sandbox::with_plugin_dirs(&self.plugin_dirs()?, self.trusted(data_dir));
        let sandbox = crate::sandbox::Sandbox::detect(&file.sandbox, trusted);
        let cwd = session_folder(cwd)?;
        let (report, runs) = crate::sandbox::report(&sandbox, &cwd);
        for line in report.lines() {
            crate::term::out(line);
        }
        Ok(if runs { ExitCode::SUCCESS } else { ExitCode::FAILURE })
    }
}

/// The session's folder `--cwd` names (default: the current directory), made absolute; it
/// must be a directory.
fn session_folder(cwd: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    let cwd = match cwd {
        Some(cwd) => cwd,
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    let cwd = std::path::absolute(&cwd)
        .with_context(|| format!("cannot resolve --cwd {}", cwd.display()))?;
    anyhow::ensure!(cwd.is_dir(), "--cwd {} is not a directory", cwd.display());
    Ok(cwd)
}

/// Entry point of the `hotsh` binary. Every failure ends with one `error: …` line on stderr
/// and exit status 1.
pub fn main() -> ExitCode {
    // What the client left open (not close-on-exec) is for hotsh only: no command, server or
    // helper it starts gets any of it.
    crate::executor::close_inherited_descriptors();
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(error) => {
            crate::term::error(&format!("{error:#}"));
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let command = match cli.command {
        // No runtime, no agent: these are done on this thread.
        Some(Command::CheckPluginChild { path }) => crate::plugins::check_child_main(&path),
        Some(Command::Plugin { command: PluginCommand::Check { path } }) => {
            init_logging("warn");
            return Ok(crate::plugins::check(&path));
        }
        Some(Command::Dev { crate_dir, cargo_args }) => {
            init_logging("warn");
            return crate::dev::run(&crate_dir, &cargo_args);
        }
        Some(Command::Sandbox { cwd, config, data_dir, plugin_dirs, no_default_plugins }) => {
            init_logging("warn");
            let agent = AgentArgs {
                plugin_dirs,
                no_default_plugins,
                data_dir,
                config,
                ..AgentArgs::default()
            };
            return agent.sandbox_report(cwd);
        }
        Some(Command::Login { status: false, keyring, .. }) => {
            init_logging("warn");
            return crate::login::login(keyring);
        }
        Some(Command::Login { status: true, agent, .. }) => {
            init_logging("warn");
            let file = ConfigFile::load(agent.config.as_deref())?;
            let flags =
                crate::model::setup::ModelFlags { model: agent.model, base_url: agent.base_url };
            // Read once: from the keyring, it is a question over D-Bus.
            let stored = crate::credentials::load();
            let env = crate::credentials::environment_with(&stored);
            let models =
                crate::model::setup::resolve(&flags, &file, &env).map_err(anyhow::Error::msg)?;
            return crate::login::status(&models, stored);
        }
        Some(Command::Logout) => {
            init_logging("warn");
            return crate::login::logout();
        }
        Some(Command::Install { bin_dir, data_dir }) => {
            init_logging("warn");
            return crate::install::run(bin_dir, data_dir.as_deref());
        }
        Some(Command::Sessions { command, data_dir }) => {
            init_logging("warn");
            let store = crate::session::store::SessionStore::new(crate::dirs::data_dir(
                data_dir.as_deref(),
            ));
            return match command {
                SessionsCommand::List { cwd } => crate::acp::run::list_sessions(&store, cwd),
                SessionsCommand::Show { id } => crate::acp::run::show_session(&store, &id),
                SessionsCommand::Export { id, arc, plugin_dirs, no_default_plugins } => {
                    let agent = AgentArgs {
                        plugin_dirs,
                        no_default_plugins,
                        data_dir,
                        ..AgentArgs::default()
                    };
                    crate::arc::export(&store, &id, &arc, &agent.plugin_dirs()?)
                }
            };
        }
        Some(Command::Replay {
            arcs,
            plugin_dirs,
            no_default_plugins,
            bless,
            junit,
            timeout,
            sandbox,
        }) => {
            init_logging("warn");
            let max_mode = crate::sandbox::Mode::parse(&sandbox).ok_or_else(|| {
                anyhow::anyhow!(
                    "unknown sandbox mode `{sandbox}`: expected read-only, workspace-write or danger-full-access"
                )
            })?;
            let agent = AgentArgs { plugin_dirs, no_default_plugins, ..AgentArgs::default() };
            let options = crate::arc::ReplayOptions {
                arcs: crate::arc::expand(&arcs)?,
                plugin_dirs: agent.plugin_dirs()?,
                bless,
                junit,
                timeout: timeout.map(std::time::Duration::from_secs),
                max_mode,
            };
            return crate::arc::replay(&options);
        }
        Some(Command::Acp(args)) => Mode::Serve(args),
        None => Mode::Serve(cli.agent),
        Some(Command::Run { agent, cwd, session, sandbox, prompt }) => {
            Mode::Run { agent, cwd, session, sandbox, prompt }
        }
    };
    // A file that reaches the size limit (a full quota, `ulimit -f`) is a write error the
    // agent reports, not a signal that kills it. (Commands get the default back: see the shim.)
    // SAFETY: setting a signal's disposition to "ignore" before any thread is started.
    unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
    let interactive = matches!(command, Mode::Run { .. });
    // In a terminal, what the user must know comes as `error:` lines; the log keeps to
    // warnings that add to them.
    init_logging(if interactive {
        "warn,agent_client_protocol=error,hotsh_core::turn=error"
    } else {
        // rmcp reports every connection's start and end at info; hotsh says it once itself.
        "info,rmcp=warn"
    });
    // The agent's configuration is read here, on the only thread: the model keys are then in
    // hand, and everything the commands' scrub drops leaves the process's environment before
    // any thread (or command) exists.
    let (mut config, run) = match command {
        Mode::Serve(args) => (args.into_config()?, None),
        Mode::Run { agent, cwd, session, sandbox, prompt } => {
            let cwd = session_folder(cwd)?;
            let mut config = agent.into_config()?;
            config.warn_without_tools = false;
            (config, Some((crate::acp::run::Target { cwd, resume: session, sandbox }, prompt)))
        }
    };
    // SAFETY: no thread has been started yet (the runtime is built below).
    config.command_env = Some(unsafe { crate::executor::take_for_commands(&config.env_policy()) });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        // The agent waits on IO; two workers keep a stuck task from stalling the rest without
        // paying for one thread per core on big machines.
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let result = runtime.block_on(async move {
        match run {
            None => serve(config).await,
            Some((target, prompt)) => {
                let host = Host::start(config)?;
                let code = crate::acp::run::run_prompt(Arc::clone(&host), target, prompt).await;
                host.shutdown().await;
                code
            }
        }
    });
    // Plugin calls abandoned after a cancel may still hold blocking threads; do not wait.
    runtime.shutdown_background();
    result
}

/// What the runtime is started for.
enum Mode {
    Serve(AgentArgs),
    Run {
        agent: AgentArgs,
        cwd: Option<PathBuf>,
        session: Option<String>,
        sandbox: Option<String>,
        prompt: String,
    },
}

async fn serve(config: HostConfig) -> anyhow::Result<ExitCode> {
    use std::io::IsTerminal as _;
    if std::io::stdin().is_terminal() {
        eprintln!(
            "hotsh speaks the Agent Client Protocol on stdin/stdout, for an editor such as Zed \
             to start; for a prompt in this terminal use `hotsh run \"…\"` (see `hotsh --help`)."
        );
    }
    // Before anything else runs (plugins load in `Host::start`): nothing but the protocol may
    // write to stdout.
    let protocol_out = crate::acp::claim_stdout().context("cannot take stdout for the protocol")?;
    let host = Host::start(config)?;
    let served = crate::acp::serve_stdio(Arc::clone(&host), protocol_out).await;
    host.shutdown().await;
    served?;
    Ok(ExitCode::SUCCESS)
}

/// Logs go to stderr (stdout belongs to the protocol). `HOTSH_LOG` takes an env-filter
/// directive such as `debug` or `hotsh_host=trace`.
fn init_logging(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("HOTSH_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(crate::term::color_stderr())
        // A write that fails (a client that closed its end of our stderr) loses that line and
        // nothing else: tracing's own report of it would go through `eprintln!`, which panics
        // on a broken pipe and would take the agent down.
        .log_internal_errors(false)
        .init();
}
