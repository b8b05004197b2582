//! The host services one plugin call receives (the ABI's `HostServices`).
//!
//! The object is bound to one call: commands it runs stream into that call's card and stop
//! when the turn is cancelled. Plugin calls run on a blocking thread; each service hands its
//! work to the host's runtime (processes are never spawned from a blocking-pool thread, see
//! DESIGN §6) and waits for the answer.

use crate::executor::{Executor, LiveOutput, RunOutcome, RunRequest};
use hotsh_abi::v1 as abi;
use hotsh_abi::{ROption, RResult, RStr, RString};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

#[derive(Debug)]
pub(crate) struct CallServices {
    pub(crate) runtime: tokio::runtime::Handle,
    pub(crate) executor: Arc<Executor>,
    pub(crate) cancel: CancellationToken,
    pub(crate) live: Arc<LiveOutput>,
    /// Spill files of this call are `<spill_stem>-<n>.log`.
    pub(crate) spill_stem: PathBuf,
    pub(crate) plugin: String,
    pub(crate) runs: AtomicU32,
}

impl abi::HostServices for CallServices {
    fn run(&self, spec: abi::CommandSpec) -> RResult<abi::CommandOutcome, RString> {
        let run = self.runs.fetch_add(1, Ordering::Relaxed) + 1;
        let mut spill_path = self.spill_stem.clone().into_os_string();
        spill_path.push(format!("-{run}.log"));
        let request = RunRequest {
            command: spec.command.into_string(),
            workdir: PathBuf::from(spec.workdir.as_str()),
            timeout: spec.timeout_ms.into_option().map(Duration::from_millis),
            spill_path: spill_path.into(),
        };
        let executor = Arc::clone(&self.executor);
        let live = Arc::clone(&self.live);
        let cancel = self.cancel.clone();
        let task = self
            .runtime
            .spawn(async move { executor.run(request, &live, &cancel).await });
        match self.runtime.block_on(task) {
            Ok(Ok(outcome)) => RResult::ROk(to_abi_outcome(outcome)),
            Ok(Err(error)) => RResult::RErr(error.to_string().into()),
            Err(join) => RResult::RErr(format!("the executor failed: {join}").into()),
        }
    }

    fn log(&self, level: abi::LogLevel, message: RStr<'_>) {
        let plugin = self.plugin.as_str();
        let message = message.as_str();
        match level {
            abi::LogLevel::Error => tracing::error!(plugin, "{message}"),
            abi::LogLevel::Warn => tracing::warn!(plugin, "{message}"),
            abi::LogLevel::Info => tracing::info!(plugin, "{message}"),
            abi::LogLevel::Debug => tracing::debug!(plugin, "{message}"),
        }
    }
}

fn to_abi_outcome(outcome: RunOutcome) -> abi::CommandOutcome {
    abi::CommandOutcome {
        exit_code: outcome.exit_code.into(),
        signal: outcome.signal.map(RString::from).into(),
        timed_out: outcome.timed_out,
        timeout_ms: outcome.timeout.as_millis() as u64,
        aborted: outcome.aborted,
        stdout: outcome.stdout.into(),
        stderr: outcome.stderr.into(),
        truncated: outcome.truncated,
        spill_path: match outcome.spill_path {
            Some(path) => ROption::RSome(path.to_string_lossy().into_owned().into()),
            None => ROption::RNone,
        },
        duration_ms: outcome.duration.as_millis() as u64,
    }
}
