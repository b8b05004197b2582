//! The command line: `hotsh [acp]`, `hotsh run`.

use crate::config::ConfigFile;
use crate::host::{Host, HostConfig};
use crate::model::ModelSpec;
use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

#[derive(Debug, Parser)]
#[command(name = "hotsh", version, about = "A coding agent for the Agent Client Protocol")]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve ACP on stdin/stdout (what an editor such as Zed launches). The default.
    Acp(AgentArgs),
    /// Rebuild a plugin crate whenever its sources change (`cargo build` in CRATE_DIR, with
    /// the arguments after `--`), so a running agent serves each new build.
    Dev {
        /// The plugin crate's directory.
        #[arg(default_value = ".")]
        crate_dir: PathBuf,
        /// Extra arguments for `cargo build`, after `--`.
        #[arg(last = true)]
        cargo_args: Vec<String>,
    },
    /// Work with plugin files.
    Plugin {
        #[command(subcommand)]
        command: PluginCommand,
    },
    /// Run one prompt in this terminal and show what a user of an ACP client would see.
    Run {
        #[command(flatten)]
        agent: AgentArgs,
        /// Working directory of the session (default: the current directory).
        #[arg(long)]
        cwd: Option<PathBuf>,
        /// The prompt.
        prompt: String,
    },
}

#[derive(Debug, Subcommand)]
enum PluginCommand {
    /// Load a plugin file the way the agent does and describe it, or say why it is rejected
    /// (exit status 1).
    Check {
        /// The plugin library, e.g. target/debug/libmy_plugin.so.
        path: PathBuf,
    },
}

/// How the agent is set up; the same for every subcommand that runs it.
#[derive(Debug, Args, Default)]
struct AgentArgs {
    /// The model: `script:PATH` plays a JSON script of responses (see the README); `none`
    /// answers every prompt with a note that no model is configured.
    #[arg(long, default_value = "none")]
    model: ModelSpecArg,
    /// A directory to load plugins from (repeatable). Default: the directory holding the
    /// `hotsh` executable, so that `cargo build` output works as is.
    #[arg(long = "plugin-dir", value_name = "DIR")]
    plugin_dirs: Vec<PathBuf>,
    /// Append every model request, as one JSON line, to FILE.
    #[arg(long, value_name = "FILE")]
    model_transcript: Option<PathBuf>,
    /// The configuration file (TOML). Default: `$XDG_CONFIG_HOME/hotsh/config.toml` (or
    /// `~/.config/hotsh/config.toml`), if it exists.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
}

#[derive(Debug, Clone, Default)]
struct ModelSpecArg(Option<ModelSpec>);

impl std::str::FromStr for ModelSpecArg {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.parse().map(|spec| Self(Some(spec)))
    }
}

impl AgentArgs {
    fn into_config(self) -> anyhow::Result<HostConfig> {
        let plugin_dirs = if self.plugin_dirs.is_empty() {
            let exe = std::env::current_exe().context("cannot find the hotsh executable")?;
            vec![exe.parent().context("the executable has no directory")?.to_owned()]
        } else {
            self.plugin_dirs
        };
        let file = ConfigFile::load(self.config.as_deref())?;
        let mut config =
            HostConfig::new(self.model.0.unwrap_or(ModelSpec::None), plugin_dirs, file);
        config.model_transcript = self.model_transcript;
        Ok(config)
    }
}

/// Entry point of the `hotsh` binary.
pub fn main() -> ExitCode {
    let command = match Cli::parse().command {
        // No runtime, no agent: load one file and report.
        Some(Command::Plugin { command: PluginCommand::Check { path } }) => {
            init_logging("warn");
            return crate::plugins::check(&path);
        }
        Some(Command::Dev { crate_dir, cargo_args }) => {
            init_logging("warn");
            return crate::dev::run(&crate_dir, &cargo_args).unwrap_or_else(|error| {
                tracing::error!("{error:#}");
                ExitCode::FAILURE
            });
        }
        command => command,
    };
    let interactive = matches!(command, Some(Command::Run { .. }));
    init_logging(if interactive { "warn" } else { "info" });
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        // The agent waits on IO; two workers keep a stuck task from stalling the rest without
        // paying for one thread per core on big machines.
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            tracing::error!(%error, "cannot start the async runtime");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        match command {
            None => serve(AgentArgs::default()).await,
            Some(Command::Acp(args)) => serve(args).await,
            Some(Command::Plugin { .. } | Command::Dev { .. }) => {
                unreachable!("handled before the runtime starts")
            }
            Some(Command::Run { agent, cwd, prompt }) => {
                let cwd = match cwd {
                    Some(cwd) => cwd,
                    None => std::env::current_dir().context("cannot read the current directory")?,
                };
                let cwd = std::path::absolute(&cwd).context("cannot resolve --cwd")?;
                let host = Host::start(agent.into_config()?)?;
                let code = crate::run_cli::run_prompt(Arc::clone(&host), cwd, prompt).await;
                host.shutdown().await;
                code
            }
        }
    });
    // Plugin calls abandoned after a cancel may still hold blocking threads; do not wait.
    runtime.shutdown_background();
    match result {
        Ok(code) => code,
        Err(error) => {
            tracing::error!("{error:#}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(args: AgentArgs) -> anyhow::Result<ExitCode> {
    let host = Host::start(args.into_config()?)?;
    let served = crate::acp::serve_stdio(Arc::clone(&host)).await;
    host.shutdown().await;
    served?;
    Ok(ExitCode::SUCCESS)
}

/// Logs go to stderr (stdout belongs to the protocol). `HOTSH_LOG` takes an env-filter
/// directive such as `debug` or `hotsh_host=trace`.
fn init_logging(default: &str) {
    use std::io::IsTerminal as _;
    let filter = tracing_subscriber::EnvFilter::try_from_env("HOTSH_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}
