//! The sandbox gate of one plugin call (DESIGN §7): which mode a command runs under (an
//! escalation the user allowed, else the session's mode under its cap), the policy the shim
//! enforces, and the facts the result carries.

use crate::executor::RunOutcome;
use crate::sandbox::classify::{Evidence, classify};
use crate::sandbox::{Enforcement, Mode, Policy, Sandbox};
use crate::session::{EscalationAnswer, EscalationAsk, Session};
use hotsh_abi::v1 as abi;
use std::path::Path;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// What a call needs to gate its commands.
#[derive(Debug, Clone)]
pub(crate) struct CallSandbox {
    pub(crate) sandbox: Arc<Sandbox>,
    /// The calling session (its mode, its cap, its client to ask); `None` in unit tests.
    pub(crate) session: Option<Arc<Session>>,
    pub(crate) call_id: String,
    pub(crate) cwd: std::path::PathBuf,
}

/// The decision for one command.
#[derive(Debug, Clone)]
pub(crate) struct Gate {
    pub(crate) mode: Mode,
    pub(crate) policy: Option<Policy>,
    enforcement: Enforcement,
    /// A wider mode may still be asked for.
    widenable: bool,
    backend: &'static str,
}

impl CallSandbox {
    /// The session's mode before any escalation, and its cap.
    fn standing(&self) -> (Mode, Option<Mode>) {
        let (choice, cap) = match &self.session {
            Some(session) => (session.sandbox_choice(), session.sandbox_cap()),
            None => (None, None),
        };
        (crate::sandbox::standing(self.sandbox.default_mode, choice, cap), cap)
    }

    /// Decides how `spec` runs; asks the user first when it wants a wider mode. An error is
    /// the text the plugin returns: nothing was run.
    pub(crate) async fn gate(
        &self,
        spec: &abi::CommandSpec,
        cancel: &CancellationToken,
    ) -> Result<Gate, String> {
        let (standing, cap) = self.standing();
        let mode = match spec.sandbox_permissions.as_ref().into_option() {
            None => standing,
            Some(request) => self.escalate(spec, request, standing, cap, cancel).await?,
        };
        let (policy, enforcement) =
            self.sandbox.policy(mode, &self.cwd).map_err(|e| e.to_string())?;
        let widenable = self.sandbox.offered()
            && mode < Mode::DangerFullAccess
            && cap.is_none_or(|cap| cap > mode);
        Ok(Gate { mode, policy, enforcement, widenable, backend: self.sandbox.backend.name() })
    }

    async fn escalate(
        &self,
        spec: &abi::CommandSpec,
        request: &abi::SandboxRequest,
        standing: Mode,
        cap: Option<Mode>,
        cancel: &CancellationToken,
    ) -> Result<Mode, String> {
        let wanted = Mode::from_abi(request.mode);
        if !self.sandbox.offered() {
            return Err(
                "sandbox_permissions cannot be used: this agent does not sandbox commands; run the command without it"
                    .to_owned(),
            );
        }
        if request.justification.trim().is_empty() {
            return Err("sandbox_permissions needs a justification for the user; nothing was run"
                .to_owned());
        }
        if wanted <= standing {
            return Err(format!(
                "sandbox_permissions `{wanted}` does not widen this session's `{standing}` mode, so nobody was asked and nothing was run; run the command without sandbox_permissions"
            ));
        }
        let ask = EscalationAsk {
            call_id: self.call_id.clone(),
            command: spec.command.to_string(),
            workdir: spec.workdir.to_string(),
            justification: request.justification.to_string(),
            mode: wanted,
            standing,
        };
        let Some(session) = &self.session else {
            return Err(refusal(EscalationAnswer::Unavailable, wanted));
        };
        if let Some(cap) = cap.filter(|cap| wanted > *cap) {
            session.record_escalation(&ask, "refused").await;
            return Err(format!(
                "escalation refused: the session is in plan mode, which allows {cap} commands only; nothing was run. Leave plan mode to run it"
            ));
        }
        match session.ask_escalation(ask, cancel).await {
            EscalationAnswer::AllowedOnce => Ok(wanted),
            answer => Err(refusal(answer, wanted)),
        }
    }
}

/// The tool error for an escalation that was not allowed.
fn refusal(answer: EscalationAnswer, wanted: Mode) -> String {
    match answer {
        EscalationAnswer::Rejected => format!(
            "the user rejected running this command under {wanted}; nothing was run. Do not retry it without asking the user"
        ),
        EscalationAnswer::Cancelled => format!(
            "the request to run this command under {wanted} was cancelled before the user answered; nothing was run"
        ),
        EscalationAnswer::Unavailable | EscalationAnswer::AllowedOnce => format!(
            "this command needs {wanted}, but no client is connected that can ask the user; nothing was run"
        ),
    }
}

impl Gate {
    /// The facts of a command that ran under this gate.
    pub(crate) fn facts(&self, outcome: &RunOutcome, workdir: &Path) -> abi::SandboxFacts {
        let denial = self.policy.as_ref().and_then(|policy| {
            classify(
                policy,
                &Evidence {
                    exit_code: outcome.exit_code,
                    signal: outcome.signal.as_deref(),
                    output: [&outcome.stdout, &outcome.stderr],
                    workdir,
                },
            )
        });
        abi::SandboxFacts {
            mode: self.mode.to_abi(),
            backend: self.backend.into(),
            enforcement: self.enforcement.describe().into(),
            denial: denial.map(|d| d.as_str().into()).into(),
            escalation_available: denial.is_some() && self.widenable,
        }
    }
}
