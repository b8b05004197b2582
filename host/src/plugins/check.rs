//! Checking a plugin build in a short-lived child process before anything else trusts it.
//!
//! A build can take down the process that loads it (corrupted code, a constructor that
//! aborts) or hang it (a constructor or `tools()` that never returns), and no in-process check
//! can catch that. So a build is first loaded by `hotsh __check-plugin PATH`: the host binary
//! re-executed, which receives the very bytes the agent read (on its stdin, so a file that
//! changes in between cannot slip past), loads them exactly as the agent does, asks the
//! plugin for its manifest, tools and prompt sections, and reports them as one JSON line.
//! Only a build the child survived, within a time limit, is accepted: by the registry before
//! it loads a build into the agent, and by `hotsh plugin check`, `hotsh dev` and
//! `hotsh install`. The registry spares the check only for the very bytes this same hotsh
//! executable checked and loaded before (`checked.rs`).

use super::loader;
use serde::{Deserialize, Serialize};
use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

/// The name of the hidden subcommand that runs the check.
pub(crate) const SUBCOMMAND: &str = "__check-plugin";

/// How long a check may take before the build counts as hung.
pub(crate) const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// What a build offers, as the checking child found it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Description {
    pub(crate) name: String,
    pub(crate) version: String,
    pub(crate) abi_version: String,
    pub(crate) content_hash: u64,
    pub(crate) load_micros: u64,
    pub(crate) tools: Vec<ToolSummary>,
    pub(crate) prompt_sections: Vec<SectionSummary>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ToolSummary {
    pub(crate) name: String,
    /// The first line of the tool's description.
    pub(crate) summary: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SectionSummary {
    pub(crate) id: String,
    pub(crate) order: u32,
    pub(crate) lines: usize,
}

impl Description {
    /// `tool-bash 0.1.0 (tools: bash, bash_output, bash_kill)`.
    pub(crate) fn one_line(&self) -> String {
        let tools: Vec<&str> = self.tools.iter().map(|t| t.name.as_str()).collect();
        let tools = if tools.is_empty() { "no tools".to_owned() } else { tools.join(", ") };
        format!("{} {} (tools: {tools})", self.name, self.version)
    }
}

/// The child's report.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
enum Report {
    Accepted(Description),
    Rejected {
        reason: String,
    },
    /// Not a hotsh plugin at all (another shared library): not worth a warning.
    NotAPlugin {
        reason: String,
    },
}

/// Why a build was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum CheckFailure {
    /// A shared library that is not a hotsh plugin.
    #[error("{0}")]
    NotAPlugin(String),
    #[error("{0}")]
    Rejected(String),
}

/// Checks the plugin file `path` in a child process that reads the file itself (blocking, at
/// most [`CHECK_TIMEOUT`]): nothing of it is held here. What was checked is known by the
/// accepted description's content hash; a rejection does not say which bytes it saw.
pub(crate) fn in_child(path: &Path) -> Result<Description, CheckFailure> {
    let file = std::fs::File::open(path).map_err(|source| {
        let unreadable = loader::Rejection::Unreadable { path: path.to_owned(), source };
        CheckFailure::Rejected(unreadable.to_string())
    })?;
    checked_in_child(path, crate::executor::HelperInput::File(file))
}

/// Checks `bytes`, the content of the plugin file `path`, in a child process (blocking, at
/// most [`CHECK_TIMEOUT`]).
pub(crate) fn bytes_in_child(
    path: &Path,
    bytes: impl AsRef<[u8]> + Send + 'static,
) -> Result<Description, CheckFailure> {
    checked_in_child(path, crate::executor::HelperInput::Bytes(Box::new(bytes)))
}

fn checked_in_child(
    path: &Path,
    input: crate::executor::HelperInput,
) -> Result<Description, CheckFailure> {
    let args: Vec<OsString> = vec![SUBCOMMAND.into(), path.as_os_str().to_owned()];
    let output = crate::executor::run_helper(&args, input, CHECK_TIMEOUT).map_err(|error| {
        CheckFailure::Rejected(format!("cannot start a process to check it: {error}"))
    })?;
    let Some(status) = output.status else {
        return Err(CheckFailure::Rejected(format!(
            "loading it did not finish within {} s (does its constructor, manifest, tools or \
             prompt_sections hang?)",
            CHECK_TIMEOUT.as_secs()
        )));
    };
    let line = output.stdout.split(|&b| b == b'\n').find(|l| !l.is_empty()).unwrap_or_default();
    match serde_json::from_slice::<Report>(line) {
        Ok(Report::Accepted(description)) => Ok(description),
        Ok(Report::Rejected { reason }) => Err(CheckFailure::Rejected(reason)),
        Ok(Report::NotAPlugin { reason }) => Err(CheckFailure::NotAPlugin(reason)),
        Err(_) => {
            use std::os::unix::process::ExitStatusExt as _;
            let how = match (status.signal(), status.code()) {
                (Some(signal), _) => {
                    format!("crashed with {}", crate::executor::signal_name(signal))
                }
                (None, Some(code)) => format!("exited with code {code}"),
                (None, None) => "ended".to_owned(),
            };
            let last_words = String::from_utf8_lossy(&output.stderr)
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .map(|l| format!("; its last output: {}", l.chars().take(300).collect::<String>()))
                .unwrap_or_default();
            Err(CheckFailure::Rejected(format!(
                "loading it {how} in the process that checked it, so it would have taken the \
                 agent down{last_words}"
            )))
        }
    }
}

/// `hotsh __check-plugin PATH`: loads the bytes on stdin as the plugin file PATH and prints one
/// JSON report on the original stdout. Runs in a throwaway process; never returns.
pub(crate) fn child_main(path: &Path) -> ! {
    use std::io::{Read as _, Write as _};
    use std::os::fd::FromRawFd as _;
    // Die with the agent that asked.
    crate::executor::die_with_parent();
    // SAFETY: plain libc calls on descriptors this process owns.
    let report_fd = unsafe {
        // No core file for a build that crashes.
        let no_core = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        libc::setrlimit(libc::RLIMIT_CORE, &no_core);
        // The report gets a descriptor of its own; whatever the plugin prints goes to stderr.
        let fd = libc::dup(1);
        libc::dup2(2, 1);
        fd
    };
    let mut bytes = Vec::new();
    let read = std::io::stdin().read_to_end(&mut bytes);
    // Before anything of the build runs: it may write nothing, reach nothing, hold nothing.
    let confined = crate::sandbox::confine::confine_checker();
    let loaded = match (read, confined) {
        (_, Err(error)) => Err(loader::Rejection::Unconfined(error)),
        // A check asks as an unsandboxed host would; the agent asks again in its own context.
        (Ok(_), Ok(())) => loader::load_bytes(path, &bytes, &hotsh_abi::ToolsContext::new(false)),
        (Err(source), Ok(())) => {
            Err(loader::Rejection::Unreadable { path: path.to_owned(), source })
        }
    };
    let report = match loaded {
        Ok(plugin) => Report::Accepted(Description {
            name: plugin.name,
            version: plugin.version,
            abi_version: plugin.abi_version,
            content_hash: plugin.content_hash,
            load_micros: plugin.load_took.as_micros() as u64,
            tools: plugin
                .tools
                .iter()
                .map(|t| ToolSummary {
                    name: t.name.clone(),
                    summary: t.description.lines().next().unwrap_or("").to_owned(),
                })
                .collect(),
            prompt_sections: plugin
                .prompt_sections
                .iter()
                .map(|s| SectionSummary {
                    id: s.id.clone(),
                    order: s.order,
                    lines: s.text.lines().count(),
                })
                .collect(),
        }),
        Err(rejection @ loader::Rejection::NotAPlugin) => {
            Report::NotAPlugin { reason: rejection.to_string() }
        }
        Err(rejection) => Report::Rejected { reason: rejection.to_string() },
    };
    let mut line = serde_json::to_vec(&report).unwrap_or_default();
    line.push(b'\n');
    if report_fd >= 0 {
        // SAFETY: `report_fd` is the duplicate made above and owned here.
        let mut out = unsafe { std::fs::File::from_raw_fd(report_fd) };
        let _ = out.write_all(&line);
    }
    std::process::exit(0)
}
