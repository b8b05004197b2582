//! The sandbox gate of one plugin call (DESIGN §7): which mode a command runs under (an
//! escalation the user allowed, else the session's mode under its cap), the policy the shim
//! enforces, and the facts the result carries.

use crate::executor::{RunOutcome, TempUse};
use crate::sandbox::classify::{Denial, Evidence, Refusal};
use crate::sandbox::{Enforcement, Mode, Policy, Sandbox};
use crate::session::{EscalationAnswer, EscalationAsk, Session};
use hotsh_abi::RString;
use hotsh_abi::v1 as abi;
use hotsh_core::permissions::{Covers, Rule};
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
    /// The session's private temp dir: its commands' `$TMPDIR` (the host's when `None`).
    pub(crate) temp: Option<crate::executor::SessionTemp>,
    /// The rules the user allowed in projects ("Always allow in this project").
    pub(crate) project_rules: crate::permissions::ProjectRules,
    /// Claude Code's `permissions.allow` rules in force, each with where it comes from: an
    /// escalation one covers is allowed without asking.
    pub(crate) settings_allows: Vec<(Rule, String)>,
}

/// What a call asks to do under the sandbox: run a command, or write a file.
#[derive(Debug, Clone)]
pub(crate) struct Action {
    /// The exact command, or the absolute path written.
    pub(crate) what: String,
    pub(crate) workdir: String,
    pub(crate) writes_file: bool,
    /// The wider mode the call asks for, if any.
    pub(crate) request: Option<abi::SandboxRequest>,
}

impl Action {
    pub(crate) fn command(spec: &abi::CommandSpec) -> Self {
        Self {
            what: spec.command.to_string(),
            workdir: spec.workdir.to_string(),
            writes_file: false,
            request: spec.sandbox_permissions.clone().into_option(),
        }
    }

    /// What a permission rule must cover to cover this action.
    fn covers(&self) -> Covers {
        if self.writes_file { Covers::Write } else { Covers::Command }
    }

    /// "the command" / "the write", and what did not happen when it is refused.
    fn words(&self) -> (&'static str, &'static str) {
        if self.writes_file {
            ("write", "nothing was written")
        } else {
            ("command", "nothing was run")
        }
    }
}

/// The decision for one command.
#[derive(Debug, Clone)]
pub(crate) struct Gate {
    pub(crate) mode: Mode,
    pub(crate) policy: Option<Policy>,
    /// The mode was widened for this call alone (the user allowed it): its command gets a
    /// sandbox of its own, not the session's environment.
    pub(crate) escalated: bool,
    enforcement: Enforcement,
    /// A wider mode may still be asked for.
    widenable: bool,
    backend: &'static str,
    /// The session's private temp dir, as hotsh made it: the command's `$TMPDIR`.
    pub(crate) temp_dir: Option<std::path::PathBuf>,
}

impl CallSandbox {
    /// The gate of a command `session` runs that no tool call asked for (its environment
    /// started ahead, a hook's command): the session's mode, no rule but its own.
    pub(crate) fn of_session(
        sandbox: &Arc<Sandbox>,
        session: &Arc<Session>,
        call_id: String,
        output_root: &Arc<crate::executor::OutputRoot>,
        project_rules: &crate::permissions::ProjectRules,
    ) -> Self {
        Self {
            sandbox: Arc::clone(sandbox),
            session: Some(Arc::clone(session)),
            call_id,
            cwd: session.cwd.clone(),
            temp: Some(crate::executor::SessionTemp::new(output_root, &session.id.0)),
            project_rules: project_rules.clone(),
            settings_allows: Vec::new(),
        }
    }

    /// The session's mode before any escalation, and its cap.
    fn standing(&self) -> (Mode, Option<Mode>) {
        let (choice, cap) = match &self.session {
            Some(session) => (session.sandbox_choice(), session.sandbox_cap()),
            None => (None, None),
        };
        // The agent's own cap narrows the session's.
        let cap = match (cap, self.sandbox.max_mode) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        (crate::sandbox::standing(self.sandbox.default_mode, choice, cap), cap)
    }

    /// The session's private temp dir, made or checked now; an error (something replaced
    /// it) is the text the command is refused with.
    fn temp_dir(&self, by: TempUse) -> Result<Option<std::path::PathBuf>, String> {
        let Some(temp) = &self.temp else { return Ok(None) };
        temp.path(by).map_err(|error| format!("this command was not run: {error}"))
    }

    /// The policy of this session's commands when no call widens it (for preparing its
    /// sandbox environment ahead); `None` when they run unconfined or cannot run.
    pub(crate) fn standing_policy(&self) -> Option<hotsh_core::executor::Policy> {
        let (mode, _) = self.standing();
        // Only looked at: a replaced one is the next command's to refuse.
        let temp = self.temp_dir(TempUse::Ahead).ok()?;
        self.sandbox.policy(mode, &self.cwd, temp.as_deref()).ok().and_then(|(policy, _)| policy)
    }

    /// The policy and `$TMPDIR` a command of the session runs with when nothing widens it (a
    /// project's hook); an error when it cannot run confined as it should.
    pub(crate) fn confinement(
        &self,
    ) -> Result<(Option<hotsh_core::executor::Policy>, Option<std::path::PathBuf>), String> {
        let (mode, _) = self.standing();
        let temp = self.temp_dir(TempUse::Command)?;
        match self.sandbox.policy(mode, &self.cwd, temp.as_deref()) {
            Ok((policy, _)) => Ok((policy, temp)),
            Err(error) => Err(format!("it cannot run confined: {error}")),
        }
    }

    /// Decides how `action` runs; asks the user first when it wants a wider mode. An error is
    /// the text the plugin returns: nothing was run (or written).
    pub(crate) async fn gate(
        &self,
        action: &Action,
        cancel: &CancellationToken,
    ) -> Result<Gate, String> {
        let (standing, cap) = self.standing();
        let temp_dir = if action.writes_file { None } else { self.temp_dir(TempUse::Command)? };
        let (mode, escalated) = match &action.request {
            None => match self.ruled_mode(action, standing, cap).await {
                Some(mode) => (mode, true),
                None => (standing, false),
            },
            Some(request) => (self.escalate(action, request, standing, cap, cancel).await?, true),
        };
        let (policy, enforcement) = if action.writes_file {
            // The host writes the file itself and checks the path: nothing for a shim.
            let enforcement = if mode == Mode::DangerFullAccess || !self.sandbox.offered() {
                Enforcement::None
            } else {
                Enforcement::Full
            };
            (None, enforcement)
        } else {
            let (rules, enforcement) = self
                .sandbox
                .policy(mode, &self.cwd, temp_dir.as_deref())
                .map_err(|e| e.to_string())?;
            (rules.map(|rules| self.sandbox.enforced(rules)), enforcement)
        };
        let widenable = self.sandbox.offered()
            && mode < Mode::DangerFullAccess
            && cap.is_none_or(|cap| cap > mode);
        let backend = if action.writes_file { "host" } else { self.sandbox.backend.name() };
        Ok(Gate { mode, policy, escalated, enforcement, widenable, backend, temp_dir })
    }

    async fn escalate(
        &self,
        action: &Action,
        request: &abi::SandboxRequest,
        standing: Mode,
        cap: Option<Mode>,
        cancel: &CancellationToken,
    ) -> Result<Mode, String> {
        let (noun, nothing) = action.words();
        let Some(wanted) = crate::sandbox::mode_from_abi(request.mode) else {
            return Err(format!(
                "sandbox_permissions asks for a sandbox mode this hotsh does not know ({:?}); {nothing}",
                request.mode
            ));
        };
        if !self.sandbox.offered() {
            return Err(format!(
                "sandbox_permissions cannot be used: this agent does not sandbox commands or writes; retry the {noun} without it"
            ));
        }
        if request.justification.trim().is_empty() {
            return Err(format!(
                "sandbox_permissions needs a justification for the user; {nothing}"
            ));
        }
        if wanted <= standing {
            return Err(format!(
                "sandbox_permissions `{wanted}` does not widen this session's `{standing}` mode, so nobody was asked and {nothing}; retry the {noun} without sandbox_permissions"
            ));
        }
        let rule = Rule::for_call(action.covers(), &action.what, wanted);
        let ask = self.ask(action, request.justification.to_string(), standing, rule);
        let Some(session) = &self.session else {
            return Err(refusal(EscalationAnswer::Unavailable, wanted, action));
        };
        if let Some(max) = self.sandbox.max_mode.filter(|max| wanted > *max) {
            session.record_escalation(&ask, "refused").await;
            return Err(format!(
                "escalation refused: this agent allows {max} access at most (its `[sandbox] max_mode`; for `hotsh replay`, its --sandbox); {nothing}"
            ));
        }
        if let Some(cap) = cap.filter(|cap| wanted > *cap) {
            session.record_escalation(&ask, "refused").await;
            return Err(format!(
                "escalation refused: the session is in plan mode, which allows {cap} access only; {nothing}. Leave plan mode to do it"
            ));
        }
        let rules = self.rules_of(session);
        if let Some(rule) =
            hotsh_core::permissions::granting(&rules, action.covers(), &action.what, wanted)
        {
            session.record_escalation(&ask, &allowed_by(rule)).await;
            return Ok(wanted);
        }
        let settings = self
            .settings_allows
            .iter()
            .find(|(rule, _)| rule.mode >= wanted && rule.covers(action.covers(), &action.what));
        if let Some((_, from)) = settings {
            session.record_escalation(&ask, &format!("allowed by {from}")).await;
            return Ok(wanted);
        }
        let rule = ask.rule.clone();
        match session.ask_escalation(ask, cancel).await {
            EscalationAnswer::AllowedOnce => Ok(wanted),
            EscalationAnswer::AllowedForSession => {
                session.add_rule(rule).await;
                Ok(wanted)
            }
            EscalationAnswer::AllowedInProject => {
                if let Err(error) = self.project_rules.add(&self.cwd, rule) {
                    // Allowed all the same: the user said yes to this call.
                    tracing::warn!(%error, "cannot keep the project's rule");
                }
                Ok(wanted)
            }
            answer => Err(refusal(answer, wanted, action)),
        }
    }

    /// The session's rules, then its project's.
    fn rules_of(&self, session: &Session) -> Vec<Rule> {
        let mut rules = session.rules();
        rules.extend(self.project_rules.of(&self.cwd));
        rules
    }

    /// The widest mode a rule grants `action` beyond `standing` (within the session's cap
    /// and the agent's own), logged as an escalation a rule allowed; `None` when no rule
    /// widens it.
    async fn ruled_mode(&self, action: &Action, standing: Mode, cap: Option<Mode>) -> Option<Mode> {
        let session = self.session.as_ref()?;
        if !self.sandbox.offered() {
            return None;
        }
        let limit = [cap, self.sandbox.max_mode].into_iter().flatten().min();
        // Nothing wider may be granted: the rules (a file read) are not looked at.
        if standing == Mode::DangerFullAccess || limit.is_some_and(|limit| limit <= standing) {
            return None;
        }
        let rules = self.rules_of(session);
        let rule = rules
            .iter()
            .filter(|rule| rule.mode > standing && limit.is_none_or(|limit| rule.mode <= limit))
            .filter(|rule| rule.covers(action.covers(), &action.what))
            .max_by_key(|rule| rule.mode)?;
        let ask = self.ask(action, String::new(), standing, rule.clone());
        session.record_escalation(&ask, &allowed_by(rule)).await;
        Some(rule.mode)
    }

    /// The question of running `action` under `rule`'s mode instead of `standing`, with the
    /// model's justification (also what is logged when a rule answers it).
    fn ask(
        &self,
        action: &Action,
        justification: String,
        standing: Mode,
        rule: Rule,
    ) -> EscalationAsk {
        EscalationAsk {
            call_id: self.call_id.clone(),
            command: action.what.clone(),
            cwd: self.cwd.display().to_string(),
            workdir: action.workdir.clone(),
            justification,
            mode: rule.mode,
            standing,
            writes_file: action.writes_file,
            rule,
            asked_by: None,
        }
    }
}

/// The answer logged for an escalation `rule` allowed without asking.
fn allowed_by(rule: &Rule) -> String {
    format!("allowed by a rule: {}", rule.describe())
}

/// The tool error for an escalation that was not allowed.
fn refusal(answer: EscalationAnswer, wanted: Mode, action: &Action) -> String {
    let (noun, nothing) = action.words();
    let doing = if action.writes_file { "writing this file" } else { "running this command" };
    match answer {
        EscalationAnswer::Rejected => format!(
            "the user rejected {doing} under {wanted}; {nothing}. Do not retry it without asking the user"
        ),
        EscalationAnswer::Cancelled => format!(
            "the request for {doing} under {wanted} was cancelled before the user answered; {nothing}"
        ),
        EscalationAnswer::Unavailable
        | EscalationAnswer::AllowedOnce
        | EscalationAnswer::AllowedForSession
        | EscalationAnswer::AllowedInProject => format!(
            "this {noun} needs {wanted}, but no client is connected that can ask the user; {nothing}"
        ),
    }
}

impl Gate {
    /// The facts of a file write under this gate: `allowed` says whether the mode allowed it.
    pub(crate) fn write_facts(&self, allowed: bool) -> abi::SandboxFacts {
        self.facts_of((!allowed).then_some("file"))
    }

    /// The facts of a command that ran under this gate, and when the sandbox refused it
    /// something, the line that says so at the end of its card.
    pub(crate) fn facts(
        &self,
        outcome: &RunOutcome,
        workdir: &Path,
    ) -> (abi::SandboxFacts, Option<String>) {
        let refusal = self.policy.as_ref().and_then(|policy| {
            crate::sandbox::classify::refusal(
                policy,
                &Evidence {
                    exit_code: outcome.exit_code,
                    signal: outcome.signal.as_deref(),
                    output: [&outcome.stdout, &outcome.stderr],
                    workdir,
                    not_run: outcome.not_run,
                },
            )
        });
        let facts = self.facts_of(refusal.as_ref().map(|r| r.denial.as_str()));
        let line = refusal.map(|refusal| self.refusal_line(&refusal, facts.escalation_available));
        (facts, line)
    }

    /// One line for the user, where they look (the end of the command's card): the mode,
    /// what it refused, and whether the agent may ask for more.
    fn refusal_line(&self, refusal: &Refusal, widenable: bool) -> String {
        let what = match (refusal.denial, &refusal.path) {
            (Denial::File, Some(path)) => format!("a write to {path}"),
            (Denial::File, None) => "a write outside the folders it may change".to_owned(),
            (Denial::Network, _) => "network access".to_owned(),
            (Denial::Syscall, _) => "a system call".to_owned(),
        };
        let next = if widenable {
            "the agent may ask you to allow it under a wider mode"
        } else {
            "no wider mode can be asked for here"
        };
        format!("[hotsh sandbox: {} mode refused {what}; {next}]", self.mode)
    }

    /// The facts of a command or write under this gate that the sandbox refused for `denial`
    /// (`None`: not refused).
    fn facts_of(&self, denial: Option<&str>) -> abi::SandboxFacts {
        let mut facts = abi::SandboxFacts::default();
        facts.mode = crate::sandbox::mode_to_abi(self.mode);
        facts.backend = self.backend.into();
        facts.enforcement = self.enforcement.describe().into();
        facts.denial = denial.map(RString::from).into();
        facts.escalation_available = denial.is_some() && self.widenable;
        facts
    }
}
