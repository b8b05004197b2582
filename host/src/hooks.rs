//! The user's command hooks, as the host runs them (`hotsh_core::hooks` has the format and
//! what a run means): read at each turn from the files users keep them in, a project's
//! allowed by the user first, each run through the executor with its payload on stdin and
//! shown as a card.
//!
//! Where they come from, in this order: `~/.claude/settings.json` and hotsh's config
//! (`[hooks]`): the user's own, run as the user; `<project>/.claude/settings.json` and
//! `settings.local.json`: anything that can write the project can write them, so they run
//! only once the user allowed them (asked once, listing them; allowed "always" they are kept
//! in the data directory by fingerprint, and a hook added or changed is asked about again),
//! and then confined as the session's commands are. `~/.claude` is read-only to confined
//! commands (`config::trusted`).

use crate::agents::AgentDef;
use crate::executor::LiveOutput;
use crate::session::{HookRun, OptionKind, Question, QuestionOption, Reply, Session, SessionEvent};
use crate::sync::lock;
use futures::future::BoxFuture;
use hotsh_core::executor::{Executor, RunRequest};
use hotsh_core::hooks::{Event, HookCommand, Hooks, Point, Ran, Verdict};
use hotsh_core::permissions::settings::{self, Bases, Fingerprint, Kind, SettingsRule, Source};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// The most of a hook's output its card shows.
const CARD_OUTPUT: usize = 4 << 10;
/// How long the hooks of a session that ends as the agent exits may take, all together.
const END_ON_EXIT: std::time::Duration = std::time::Duration::from_secs(2);

/// The option ids of the question that asks for a project's hooks.
const RUN_FOR_SESSION: &str = "hooks-session";
const RUN_ALWAYS: &str = "hooks-always";
const DO_NOT_RUN: &str = "hooks-refuse";

/// What runs the hooks of every session of the agent.
#[derive(Debug)]
pub(crate) struct HookHost {
    pub(crate) executor: Arc<dyn Executor>,
    pub(crate) sandbox: Arc<crate::sandbox::Sandbox>,
    pub(crate) output_root: Arc<crate::executor::OutputRoot>,
    pub(crate) project_rules: crate::permissions::ProjectRules,
    /// `~/.claude` (`None` without a home).
    pub(crate) claude_home: Option<PathBuf>,
    /// hotsh's config's `[hooks]`, in Claude's shape.
    pub(crate) configured: Vec<HookCommand>,
    /// What was skipped in the config's `[hooks]`.
    pub(crate) configured_skipped: Vec<String>,
    /// The config's `[agents]`.
    pub(crate) configured_agents: std::collections::BTreeMap<String, crate::agents::AgentConfig>,
    /// Where session logs are (each hook's `transcript_path`).
    pub(crate) store: crate::session::store::SessionStore,
    /// The plugins (their hooks, read at each point: a reload applies from the next one).
    pub(crate) registry: Arc<crate::plugins::Registry>,
    /// The host's runtime, where a plugin hook's host services run their work.
    pub(crate) runtime: tokio::runtime::Handle,
    sessions: Mutex<HashMap<String, SessionHooks>>,
    arc: Mutex<ArcHooks>,
}

/// An arc's part: each turn's hooks recorded, or played from a recording.
#[derive(Debug, Default)]
struct ArcHooks {
    recorder: Option<Arc<crate::arc::Recorder>>,
    /// Replaying: the hooks of each (session, turn) recorded, the sessions numbered in the
    /// order they were opened.
    replay: Option<HashMap<(u64, u64), RecordedTurn>>,
    /// Sessions opened so far.
    opened: u64,
}

/// The hooks and permission rules of the settings files, and what was skipped reading them.
#[derive(Debug, Default)]
struct Settings {
    hooks: Vec<HookCommand>,
    rules: Vec<SettingsRule>,
    /// The agent definitions (`agents.rs`): they are read with the settings, and a project's
    /// need the same consent as its hooks.
    agents: Vec<AgentDef>,
    skipped: Vec<String>,
}

/// What an arc recorded for one turn: the hooks, the permission rules (kind, rule, source),
/// and the project's hooks and rules allowed then.
#[derive(Debug, Default, Clone)]
struct RecordedTurn {
    hooks: Vec<HookCommand>,
    rules: Vec<(Kind, String, Source)>,
    agents: Vec<AgentDef>,
    allowed: Vec<Fingerprint>,
}

impl RecordedTurn {
    /// The recorded rules, read for a session in `cwd`.
    fn rules_in(&self, cwd: &Path, claude_home: Option<&Path>) -> Vec<SettingsRule> {
        let home = claude_home.and_then(Path::parent);
        self.rules
            .iter()
            .filter_map(|(kind, text, source)| {
                let root = if source.is_project() { cwd } else { home.unwrap_or(cwd) };
                SettingsRule::parse(*kind, text, *source, Bases { cwd, root, home }).ok()
            })
            .collect()
    }
}

/// What one session's hooks remember.
#[derive(Debug, Default)]
struct SessionHooks {
    /// The session's number, in the order sessions were opened (an arc's key).
    number: u64,
    /// Turns so far (an arc's key).
    turns: u64,
    /// `SessionStart` is due with this source at its next prompt.
    starting: Option<&'static str>,
    /// Project hooks the user allowed for this session only, or refused in it.
    allowed: HashSet<Fingerprint>,
    refused: HashSet<Fingerprint>,
}

/// What the user said of a project's hooks and allow rules, by fingerprint: allowed in the
/// project (kept in the data directory), allowed or refused for the session.
#[derive(Debug, Default)]
struct Consent {
    project: Vec<Fingerprint>,
    session: HashSet<Fingerprint>,
    refused: HashSet<Fingerprint>,
}

impl Consent {
    fn allows(&self, print: &Fingerprint) -> bool {
        self.project.contains(print) || self.session.contains(print)
    }

    /// Whether the user was asked about it already (allowed or refused).
    fn decided(&self, print: &Fingerprint) -> bool {
        self.allows(print) || self.refused.contains(print)
    }

    /// In words, for `/hooks`.
    fn standing(&self, print: &Fingerprint) -> &'static str {
        if self.project.contains(print) {
            "allowed in this project"
        } else if self.session.contains(print) {
            "allowed for this session"
        } else if self.refused.contains(print) {
            "refused in this session"
        } else {
            "not allowed yet (asked before it first applies)"
        }
    }
}

impl HookHost {
    #[allow(clippy::too_many_arguments, reason = "the host's parts it runs hooks with")]
    pub(crate) fn new(
        executor: Arc<dyn Executor>,
        sandbox: Arc<crate::sandbox::Sandbox>,
        output_root: Arc<crate::executor::OutputRoot>,
        project_rules: crate::permissions::ProjectRules,
        claude_home: Option<PathBuf>,
        configured: &serde_json::Value,
        store: crate::session::store::SessionStore,
        registry: Arc<crate::plugins::Registry>,
    ) -> Self {
        let (configured, configured_skipped) = hotsh_core::hooks::parse(configured, Source::Config);
        Self {
            configured_agents: std::collections::BTreeMap::new(),
            executor,
            sandbox,
            output_root,
            project_rules,
            claude_home,
            configured,
            configured_skipped,
            store,
            registry,
            runtime: tokio::runtime::Handle::current(),
            sessions: Mutex::default(),
            arc: Mutex::default(),
        }
    }

    /// Records each turn's hooks into `recorder`'s arc.
    pub(crate) fn record_to(&self, recorder: Option<Arc<crate::arc::Recorder>>) {
        lock(&self.arc).recorder = recorder;
    }

    /// Plays each turn's hooks from an arc's `hooks` entries instead of reading settings.
    pub(crate) fn replay_from(&self, entries: &[serde_json::Value]) {
        let mut replay = HashMap::new();
        for entry in entries {
            let key = (
                entry["session"].as_u64().unwrap_or_default(),
                entry["turn"].as_u64().unwrap_or_default(),
            );
            let hooks =
                entry["hooks"].as_array().into_iter().flatten().filter_map(from_arc).collect();
            let rules = entry["permissions"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|rule| {
                    let kind = Kind::parse(rule["kind"].as_str()?)?;
                    let source = source_of(rule["source"].as_str()?)?;
                    Some((kind, rule["rule"].as_str()?.to_owned(), source))
                })
                .collect();
            let agents = entry["agents"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(agent_from_arc)
                .collect();
            let allowed = serde_json::from_value(entry["allowed"].clone()).unwrap_or_default();
            replay.insert(key, RecordedTurn { hooks, rules, agents, allowed });
        }
        lock(&self.arc).replay = Some(replay);
    }

    /// A session began serving (`startup` for a new one, `resume` for one loaded or
    /// resumed): its next prompt runs `SessionStart` first.
    pub(crate) fn opened(&self, session: &str, source: &'static str) {
        let mut sessions = lock(&self.sessions);
        let state = sessions.entry(session.to_owned()).or_insert_with(|| {
            let mut arc = lock(&self.arc);
            arc.opened += 1;
            SessionHooks { number: arc.opened, ..SessionHooks::default() }
        });
        state.starting = Some(source);
    }

    /// The consent given in session `id`, with `project`, the hooks and rules allowed in its
    /// project.
    fn consent(&self, id: &str, project: Vec<Fingerprint>) -> Consent {
        let sessions = lock(&self.sessions);
        let (session, refused) = sessions
            .get(id)
            .map(|state| (state.allowed.clone(), state.refused.clone()))
            .unwrap_or_default();
        Consent { project, session, refused }
    }

    /// The source of a `SessionStart` due now (taken: it runs once).
    pub(crate) fn starting(&self, session: &str) -> Option<&'static str> {
        lock(&self.sessions).get_mut(session).and_then(|state| state.starting.take())
    }

    /// The hooks and permission rules in force for a session in `cwd` now, and what was
    /// skipped reading them.
    fn load(&self, cwd: &Path) -> Settings {
        let mut settings = Settings::default();
        let project = cwd.join(".claude");
        let home = self.claude_home.as_ref().and_then(|dir| dir.parent());
        let files = [
            (self.claude_home.as_ref().map(|dir| dir.join("settings.json")), Source::User),
            (None, Source::Config),
            (Some(project.join("settings.json")), Source::Project),
            (Some(project.join("settings.local.json")), Source::ProjectLocal),
        ];
        for (path, source) in files {
            if source == Source::Config {
                settings.hooks.extend(self.configured.iter().cloned());
                settings.skipped.extend(self.configured_skipped.iter().cloned());
                continue;
            }
            let Some(path) = path else { continue };
            let text = match std::fs::read(&path) {
                Ok(text) => text,
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
                Err(error) => {
                    settings.skipped.push(format!("cannot read {}: {error}", path.display()));
                    continue;
                }
            };
            let file = match serde_json::from_slice::<serde_json::Value>(&text) {
                Ok(file) => file,
                Err(error) => {
                    settings.skipped.push(format!(
                        "{} is not valid JSON ({error}): its hooks and permissions do not apply",
                        path.display()
                    ));
                    continue;
                }
            };
            let (hooks, skipped) = hotsh_core::hooks::parse(&file["hooks"], source);
            settings.hooks.extend(hooks);
            settings.skipped.extend(skipped);
            let root = if source.is_project() { cwd } else { home.unwrap_or(cwd) };
            let bases = Bases { cwd, root, home };
            let (rules, skipped) = settings::parse(&file["permissions"], source, bases);
            settings.rules.extend(rules);
            settings.skipped.extend(skipped);
        }
        settings.agents = crate::agents::load(
            self.claude_home.as_deref(),
            cwd,
            &self.configured_agents,
            &mut settings.skipped,
        );
        settings
    }

    /// The hooks a turn of `session` runs: the files as they are now.
    pub(crate) fn for_turn(self: &Arc<Self>, session: &Session) -> Arc<TurnHooks> {
        let key = {
            let mut sessions = lock(&self.sessions);
            let state = sessions.entry(session.id.0.clone()).or_default();
            state.turns += 1;
            (state.number, state.turns)
        };
        let arc = lock(&self.arc);
        let (settings, allowed) = match &arc.replay {
            Some(replay) => {
                let recorded = replay.get(&key).cloned().unwrap_or_default();
                let rules = recorded.rules_in(&session.cwd, self.claude_home.as_deref());
                let settings = Settings {
                    hooks: recorded.hooks,
                    rules,
                    agents: recorded.agents,
                    skipped: Vec::new(),
                };
                (settings, Some(recorded.allowed))
            }
            None => {
                let settings = self.load(&session.cwd);
                for why in &settings.skipped {
                    tracing::warn!(session = %session.id, "settings: {why}");
                }
                (settings, None)
            }
        };
        if let Some(recorder) = &arc.recorder
            && !(settings.hooks.is_empty()
                && settings.rules.is_empty()
                && settings.agents.is_empty())
        {
            let allowed = self.project_rules.hooks_allowed(&session.cwd);
            let rules: Vec<serde_json::Value> = settings
                .rules
                .iter()
                .map(|rule| serde_json::json!({"kind": rule.kind.as_str(), "rule": rule.text, "source": source_name(rule.source)}))
                .collect();
            recorder.hooks(&serde_json::json!({
                "session": key.0,
                "turn": key.1,
                "hooks": settings.hooks.iter().map(to_arc).collect::<Vec<_>>(),
                "permissions": rules,
                "agents": settings.agents.iter().map(agent_to_arc).collect::<Vec<_>>(),
                "allowed": allowed,
            }));
        }
        drop(arc);
        let mut events: HashSet<Event> = settings.hooks.iter().map(|hook| hook.event).collect();
        // Deny and ask rules are judged where `PreToolUse` hooks run.
        if settings.rules.iter().any(|rule| rule.kind != Kind::Allow) {
            events.insert(Event::PreToolUse);
        }
        Arc::new(TurnHooks {
            host: Arc::clone(self),
            session: session.id.0.clone(),
            hooks: settings.hooks,
            rules: settings.rules,
            agents: settings.agents,
            events,
            may_ask: true,
            subagent: session.parent.is_some(),
            allowed,
        })
    }

    /// Runs the `SessionEnd` hooks of a session that closes (`reason`: `close`, or
    /// `prompt_input_exit` when the agent exits), with the hooks already allowed (nobody is
    /// left to ask), then forgets the session.
    pub(crate) async fn ended(self: &Arc<Self>, session: &Arc<Session>, reason: &str) {
        let mut hooks = Arc::unwrap_or_clone(self.for_turn(session));
        hooks.may_ask = false;
        if hooks.wants(Event::SessionEnd) {
            let point =
                Point::new(Event::SessionEnd, reason, serde_json::json!({ "reason": reason }));
            let cancel = CancellationToken::new();
            let run = hooks.run(session, point, &cancel);
            if reason != "prompt_input_exit" {
                run.await;
            } else if tokio::time::timeout(END_ON_EXIT, run).await.is_err() {
                tracing::warn!(session = %session.id, "SessionEnd hooks did not end in time");
            }
        }
        lock(&self.sessions).remove(&session.id.0);
    }

    /// Runs the `SessionEnd` hooks of every session of `sessions` (the agent exits): the
    /// settings of each folder are read once, and a session whose folder configures no
    /// `SessionEnd` hook (nor the config, nor a plugin) only forgets its state.
    pub(crate) async fn ended_all(self: &Arc<Self>, sessions: &[Arc<Session>], reason: &str) {
        let replaying = lock(&self.arc).replay.is_some();
        let everywhere = replaying
            || self.configured.iter().any(|hook| hook.event == Event::SessionEnd)
            || self.registry.snapshot().hooks_on(Event::SessionEnd.as_str());
        let mut folders: HashMap<PathBuf, bool> = HashMap::new();
        let mut ending = Vec::new();
        for session in sessions {
            let wants = everywhere
                || *folders.entry(session.cwd.clone()).or_insert_with(|| {
                    self.load(&session.cwd).hooks.iter().any(|hook| hook.event == Event::SessionEnd)
                });
            if wants {
                ending.push(self.ended(session, reason));
            } else {
                lock(&self.sessions).remove(&session.id.0);
            }
        }
        futures::future::join_all(ending).await;
    }

    /// `/hooks`: what is configured for a session in `cwd`, from where, and whether a
    /// project's hook may run.
    pub(crate) fn listing(&self, session: &Session) -> String {
        let Settings { hooks, rules, agents, skipped } = self.load(&session.cwd);
        if hooks.is_empty() && rules.is_empty() && agents.is_empty() && skipped.is_empty() {
            return "No hooks are configured. hotsh reads Claude Code's `hooks` (and \
                    `permissions`) from `~/.claude/settings.json`, `.claude/settings.json` and \
                    `.claude/settings.local.json` in the session's folder, and `[hooks]` from \
                    its config."
                .to_owned();
        }
        let consent = self.consent(&session.id.0, self.project_rules.hooks_allowed(&session.cwd));
        let standing = |source: Source, print: &Fingerprint, own: &'static str| {
            if source.is_project() { consent.standing(print) } else { own }
        };
        let mut lines = vec!["Hooks (event, matcher, command, from):".to_owned()];
        if hooks.is_empty() {
            lines.push("- none".to_owned());
        }
        for hook in &hooks {
            let standing = standing(hook.source, &hook.fingerprint(), "runs as you");
            let matcher = if hook.matcher.is_empty() { "*" } else { &hook.matcher };
            lines.push(format!(
                "- {} `{matcher}`: `{}` ({}, timeout {} s; {standing})",
                hook.event,
                hook.command,
                hook.source.describe(),
                hook.timeout.as_secs_f64()
            ));
        }
        if !rules.is_empty() {
            lines.push(
                "Permission rules (`/permissions` lists the ones you allowed in hotsh):".to_owned(),
            );
        }
        for rule in &rules {
            let standing = match rule.kind {
                Kind::Allow => standing(rule.source, &rule.fingerprint(), "applies"),
                // Restricting needs nobody's consent.
                Kind::Ask | Kind::Deny => "applies",
            };
            lines.push(format!("- {} ({standing})", rule.describe()));
        }
        if !agents.is_empty() {
            lines.push("Agents (the `task` tool's subagents run them):".to_owned());
        }
        for agent in &agents {
            let standing = standing(agent.source, &agent.fingerprint, "offered");
            lines.push(format!(
                "- {}: {} ({}; {standing})",
                agent.name,
                agent.description,
                agent.origin()
            ));
        }
        for why in skipped {
            lines.push(format!("- skipped: {why}"));
        }
        lines.join("\n")
    }
}

/// The hooks of one turn.
#[derive(Clone)]
pub(crate) struct TurnHooks {
    host: Arc<HookHost>,
    session: String,
    hooks: Vec<HookCommand>,
    /// Claude Code's permission rules of the settings files.
    rules: Vec<SettingsRule>,
    /// The agent definitions, the project's among them whether allowed or not.
    agents: Vec<AgentDef>,
    events: HashSet<Event>,
    /// A project's hooks not allowed yet may be asked about (not when the session ends).
    may_ask: bool,
    /// The session is a subagent: the session's own events are its parent's business (its
    /// start and end are `SubagentStart` and `SubagentStop`, run by the parent).
    subagent: bool,
    /// The project's hooks allowed "always", as an arc recorded them (a replay); `None`: as
    /// the data directory keeps them.
    allowed: Option<Vec<Fingerprint>>,
}

impl Hooks for TurnHooks {
    fn wants(&self, event: Event) -> bool {
        if self.subagent && !runs_in_subagents(event) {
            return false;
        }
        self.events.contains(&event) || self.host.registry.snapshot().hooks_on(event.as_str())
    }

    fn starting(&self) -> Option<&'static str> {
        self.host.starting(&self.session)
    }

    fn run<'a>(
        &'a self,
        session: &'a Arc<Session>,
        point: Point,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Verdict> {
        Box::pin(async move {
            let ruled = self.judge(&point);
            let plugins: Vec<(HookCommand, Arc<crate::plugins::LoadedPlugin>)> = self
                .plugin_hooks(point.event)
                .into_iter()
                .filter(|(hook, _)| hook.matches(&point.subject))
                .collect();
            let matching: Vec<&HookCommand> = self
                .hooks
                .iter()
                .filter(|hook| hook.event == point.event && hook.matches(&point.subject))
                .collect();
            if matching.is_empty() && plugins.is_empty() {
                return ruled;
            }
            // A notification is about a question being asked: it asks none of its own.
            if point.event != Event::Notification
                && matching.iter().any(|hook| hook.source.is_project())
            {
                self.settle_consent(session, cancel).await;
            }
            let consent = if matching.iter().any(|hook| hook.source.is_project()) {
                self.consent(session)
            } else {
                Consent::default()
            };
            let runnable: Vec<&HookCommand> = matching
                .into_iter()
                .filter(|hook| !hook.source.is_project() || consent.allows(&hook.fingerprint()))
                .collect();
            let payload = self.payload(session, &point);
            let runs = runnable.iter().map(|hook| self.run_one(session, hook, &payload, cancel));
            let by_plugins = plugins
                .iter()
                .map(|(hook, plugin)| self.run_plugin(session, hook, plugin, &payload, cancel));
            let (mut verdicts, by_plugins) = futures::future::join(
                futures::future::join_all(runs),
                futures::future::join_all(by_plugins),
            )
            .await;
            verdicts.extend(by_plugins);
            verdicts.push(ruled);
            Verdict::combine(verdicts)
        })
    }

    fn settle<'a>(
        &'a self,
        session: &'a Arc<Session>,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, ()> {
        Box::pin(self.settle_consent(session, cancel))
    }
}

impl TurnHooks {
    /// The hooks the loaded plugins declare for `event` now (each plugin's build as it is at
    /// this point: one reloaded during the turn serves from the next point on).
    fn plugin_hooks(&self, event: Event) -> Vec<(HookCommand, Arc<crate::plugins::LoadedPlugin>)> {
        let snapshot = self.host.registry.snapshot();
        snapshot
            .hooks_for(event.as_str())
            .into_iter()
            .map(|(plugin, matcher)| {
                let hook = HookCommand {
                    event,
                    matcher,
                    command: format!("plugin {}", plugin.name),
                    timeout: hotsh_core::hooks::DEFAULT_TIMEOUT,
                    source: Source::Plugin,
                };
                (hook, plugin)
            })
            .collect()
    }

    /// Runs a plugin's hook (on a thread of its own: the plugin's code blocks while its host
    /// services work) and shows its card; what it says.
    async fn run_plugin(
        &self,
        session: &Arc<Session>,
        hook: &HookCommand,
        plugin: &Arc<crate::plugins::LoadedPlugin>,
        payload: &[u8],
        cancel: &CancellationToken,
    ) -> Verdict {
        let host = &self.host;
        let call_id = session.next_call_id();
        let services = crate::plugins::CallServices {
            runtime: host.runtime.clone(),
            executor: Arc::clone(&host.executor),
            cancel: cancel.clone(),
            live: Arc::new(LiveOutput::new(1)),
            spill_stem: host.output_root.session_dir(&session.id.0).join(&call_id.0),
            plugin: plugin.name.clone(),
            tool: format!("{}-hook", plugin.name),
            runs: std::sync::atomic::AtomicU32::new(0),
            session_id: session.id.0.clone(),
            task_output_dir: host.output_root.session_dir(&session.id.0),
            started: std::sync::Mutex::default(),
            last_end: std::sync::Mutex::default(),
            sandbox: crate::plugins::gate::CallSandbox::of_session(
                &host.sandbox,
                session,
                call_id.0.clone(),
                &host.output_root,
                &host.project_rules,
            ),
        };
        let (api, event) = (plugin.api, hook.event.as_str().to_owned());
        let payload = String::from_utf8_lossy(payload).into_owned();
        let running =
            tokio::task::spawn_blocking(move || api.run_hook(&event, &payload, &services));
        let ran = match tokio::time::timeout(hook.timeout, running).await {
            Ok(Ok(Ok(output))) => Ran { exit_code: Some(0), stdout: output, ..Ran::default() },
            Ok(Ok(Err(error))) => Ran { exit_code: Some(1), stderr: error, ..Ran::default() },
            Ok(Err(error)) => Ran { not_run: true, stderr: error.to_string(), ..Ran::default() },
            Err(_) => Ran { timed_out: true, ..Ran::default() },
        };
        self.show(session, hook, &ran, call_id).await
    }

    /// What the permission rules say of a `PreToolUse` point: a deny rule refuses the call,
    /// an ask rule asks the user (deny first).
    fn judge(&self, point: &Point) -> Verdict {
        if point.event != Event::PreToolUse {
            return Verdict::default();
        }
        let input = point.fields.get("tool_input").cloned().unwrap_or_default();
        let Some(rule) = settings::judge(&self.rules, &point.subject, &input) else {
            return Verdict::default();
        };
        let decision = match rule.kind {
            Kind::Deny => hotsh_core::hooks::Permission::Deny,
            Kind::Ask | Kind::Allow => hotsh_core::hooks::Permission::Ask,
        };
        let reason = match rule.kind {
            Kind::Deny => format!("{} denies it", rule.describe()),
            Kind::Ask | Kind::Allow => format!("{} asks for it", rule.describe()),
        };
        Verdict { permission: Some((decision, reason)), ..Verdict::default() }
    }

    /// Claude Code's allow rules that apply now, as the rules an escalation they cover is
    /// allowed by (a project's only once allowed), each with where it comes from.
    pub(crate) fn allow_rules(
        &self,
        session: &Session,
    ) -> Vec<(hotsh_core::permissions::Rule, String)> {
        let allows = self.rules.iter().filter(|rule| rule.kind == Kind::Allow);
        // The project's consent is a file read (asked at every call): only when it matters.
        let consent =
            allows.clone().any(|rule| rule.source.is_project()).then(|| self.consent(session));
        allows
            .filter(|rule| {
                !rule.source.is_project()
                    || consent.as_ref().is_some_and(|consent| consent.allows(&rule.fingerprint()))
            })
            .filter_map(|rule| Some((rule.as_rule()?, rule.describe())))
            .collect()
    }

    /// The agents a subagent of `session` may run now: the user's and the config's, and the
    /// project's the user allowed.
    pub(crate) fn agents(&self, session: &Session) -> Vec<AgentDef> {
        if !self.agents.iter().any(|agent| agent.source.is_project()) {
            return self.agents.clone();
        }
        let consent = self.consent(session);
        self.agents
            .iter()
            .filter(|agent| !agent.source.is_project() || consent.allows(&agent.fingerprint))
            .cloned()
            .collect()
    }

    /// The consent given in `session` now: the project's as the data directory keeps it (or
    /// as an arc recorded it, replaying), and the session's own.
    fn consent(&self, session: &Session) -> Consent {
        let project = match &self.allowed {
            Some(allowed) => allowed.clone(),
            None => self.host.project_rules.hooks_allowed(&session.cwd),
        };
        self.host.consent(consent_key(session), project)
    }

    /// Asks the user about the project's hooks nobody allowed or refused yet (all of them at
    /// once, the first time one would run).
    async fn settle_consent(&self, session: &Arc<Session>, cancel: &CancellationToken) {
        let any = self.hooks.iter().any(|hook| hook.source.is_project())
            || self.rules.iter().any(|rule| rule.source.is_project() && rule.kind == Kind::Allow)
            || self.agents.iter().any(|agent| agent.source.is_project());
        // Nothing of a project's to ask about: its consent file is not read.
        if !any || !self.may_ask {
            return;
        }
        let consent = self.consent(session);
        let pending: Vec<(Fingerprint, String)> = {
            let mut seen = HashSet::new();
            let hooks = self.hooks.iter().filter(|hook| hook.source.is_project()).map(|hook| {
                let matcher = if hook.matcher.is_empty() { "*" } else { &hook.matcher };
                let listed = format!(
                    "{} ({matcher}, from {}): {}",
                    hook.event,
                    hook.source.describe(),
                    hook.command
                );
                (hook.fingerprint(), listed)
            });
            // Only what allows: a project's deny and ask rules apply unasked.
            let rules = self
                .rules
                .iter()
                .filter(|rule| rule.source.is_project() && rule.kind == Kind::Allow)
                .map(|rule| (rule.fingerprint(), rule.describe()));
            let agents =
                self.agents.iter().filter(|agent| agent.source.is_project()).map(|agent| {
                    let listed = format!(
                        "agent `{}` (from {}): {}",
                        agent.name,
                        agent.origin(),
                        agent.description
                    );
                    (agent.fingerprint.clone(), listed)
                });
            hooks
                .chain(rules)
                .chain(agents)
                .filter(|(print, _)| !consent.decided(print) && seen.insert(print.clone()))
                .collect()
        };
        if pending.is_empty() {
            return;
        }
        let listed: Vec<String> = pending.iter().map(|(_, listed)| listed.clone()).collect();
        let option = |id: &str, label: &str, kind| QuestionOption {
            id: id.to_owned(),
            label: label.to_owned(),
            kind,
        };
        let asked = session.next_call_id();
        let question = Question {
            call_id: asked.0.clone(),
            title: format!("Run this project's hooks? ({} new)", pending.len()),
            intro: String::from(
                "This project's `.claude/` settings configure hooks (or rules that allow \
                 commands, or agents) that hotsh has not used for you before. A hook would run \
                 in your session folder, confined as the session's commands are; an allow rule \
                 would answer yes for you when a command it covers asks for more access; an \
                 agent's instructions would steer a subagent the model starts. Anything \
                 that can write the project can write these files, so they apply only if you \
                 allow them here (one added or changed later is asked about again).",
            ),
            quoted: vec![("What they are".to_owned(), listed.join("\n"))],
            options: vec![
                option(RUN_FOR_SESSION, "Run them in this session", OptionKind::AllowOnce),
                option(RUN_ALWAYS, "Always run them in this project", OptionKind::AllowAlways),
                option(DO_NOT_RUN, "Do not run them", OptionKind::RejectOnce),
            ],
        };
        let reply = session.ask(question, cancel).await;
        let prints: Vec<Fingerprint> = pending.into_iter().map(|(print, _)| print).collect();
        let note = {
            let mut state = lock(&self.host.sessions);
            let mine = state.entry(consent_key(session).to_owned()).or_default();
            match &reply {
                Reply::Chose(id) if id == RUN_ALWAYS || id == RUN_FOR_SESSION => {
                    mine.allowed.extend(prints.iter().cloned());
                    None
                }
                // Refused, or not answered: not run in this session (asked again in the next).
                _ => {
                    mine.refused.extend(prints.iter().cloned());
                    Some(format!(
                        "These hooks and rules from the project's `.claude/` settings were not allowed ({}) and do not apply in this session:\n{}",
                        reply.as_str(),
                        listed.join("\n")
                    ))
                }
            }
        };
        if matches!(&reply, Reply::Chose(id) if id == RUN_ALWAYS)
            && let Err(error) = self.host.project_rules.allow_hooks(&session.cwd, &prints)
        {
            tracing::warn!(%error, "cannot keep the project's hooks as allowed; allowed for this session");
        }
        if let Some(detail) = note {
            let call_id = session.next_call_id();
            let title = "Project hooks not run".to_owned();
            session.emit(SessionEvent::HostNote { call_id, title, detail }).await;
        }
    }

    /// The JSON every hook of `point` reads on stdin: Claude's common fields, then the
    /// event's own.
    fn payload(&self, session: &Session, point: &Point) -> Vec<u8> {
        let permission_mode = if session.planning() {
            "plan"
        } else if session.sandbox_choice() == Some(hotsh_core::sandbox::Mode::DangerFullAccess) {
            "bypassPermissions"
        } else {
            "default"
        };
        let transcript = self
            .host
            .store
            .path_of(&session.id.0)
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut payload = serde_json::Map::new();
        payload.insert("session_id".into(), session.id.0.clone().into());
        payload.insert("transcript_path".into(), transcript.into());
        payload.insert("cwd".into(), session.cwd.to_string_lossy().into_owned().into());
        payload.insert("permission_mode".into(), permission_mode.into());
        payload.insert("hook_event_name".into(), point.event.as_str().into());
        payload.extend(point.fields.clone());
        serde_json::to_vec(&payload).unwrap_or_default()
    }

    /// Runs one hook and shows its card; what it says.
    async fn run_one(
        &self,
        session: &Arc<Session>,
        hook: &HookCommand,
        payload: &[u8],
        cancel: &CancellationToken,
    ) -> Verdict {
        let call_id = session.next_call_id();
        let ran = self.execute(session, hook, payload, &call_id.0, cancel).await;
        self.show(session, hook, &ran, call_id).await
    }

    /// Shows a hook's run as a card; what it says.
    async fn show(
        &self,
        session: &Session,
        hook: &HookCommand,
        ran: &Ran,
        call_id: hotsh_core::session::ToolCallId,
    ) -> Verdict {
        let verdict = Verdict::of(hook, ran);
        let status = if ran.timed_out {
            "timed out".to_owned()
        } else if ran.not_run {
            "not run".to_owned()
        } else if hook.source == Source::Plugin {
            if ran.exit_code == Some(0) { "answered" } else { "failed" }.to_owned()
        } else {
            ran.exit_code.map_or_else(|| "killed".to_owned(), |code| format!("exit {code}"))
        };
        let mut output = String::new();
        if !verdict.quiet {
            output.push_str(&ran.stdout);
        }
        if !ran.stderr.trim().is_empty() {
            if !output.is_empty() && !output.ends_with('\n') {
                output.push('\n');
            }
            output.push_str(&ran.stderr);
        }
        let output = hotsh_core::text::cut_middle(
            &output,
            CARD_OUTPUT,
            CARD_OUTPUT / 2,
            CARD_OUTPUT / 2,
            |cut| format!("[… {cut} bytes not shown …]"),
        );
        let run = HookRun {
            event: hook.event.as_str().to_owned(),
            command: hook.command.clone(),
            source: match hook.source {
                Source::Plugin => hook.command.clone(),
                source => source.describe().to_owned(),
            },
            failed: ran.exit_code != Some(0) || ran.timed_out || ran.not_run,
            status,
            output,
            outcome: describe(&verdict),
        };
        session.emit(SessionEvent::HookRan { call_id, run: Box::new(run) }).await;
        verdict
    }

    /// Runs `hook`'s command through the executor: the user's own unconfined, a project's
    /// under the session's sandbox.
    async fn execute(
        &self,
        session: &Arc<Session>,
        hook: &HookCommand,
        payload: &[u8],
        card: &str,
        cancel: &CancellationToken,
    ) -> Ran {
        let host = &self.host;
        let (policy, temp_dir) = if hook.source.is_project() {
            let call = crate::plugins::gate::CallSandbox::of_session(
                &host.sandbox,
                session,
                String::new(),
                &host.output_root,
                &host.project_rules,
            );
            match call.confinement() {
                Ok(confinement) => confinement,
                Err(why) => {
                    return Ran { not_run: true, stderr: why, ..Ran::default() };
                }
            }
        } else {
            (None, None)
        };
        let cwd = session.cwd.to_string_lossy().into_owned();
        let environment = policy.is_some().then(|| session.id.0.clone());
        let request = RunRequest {
            command: hook.command.clone(),
            workdir: session.cwd.clone(),
            timeout: Some(hook.timeout),
            spill_path: host
                .output_root
                .session_dir(&session.id.0)
                .join(format!("hook-{card}.log")),
            policy,
            environment,
            temp_dir,
            stdin: Some(payload.to_vec()),
            env: vec![
                ("CLAUDE_PROJECT_DIR".to_owned(), cwd.clone()),
                ("HOTSH_PROJECT_DIR".to_owned(), cwd),
                ("HOTSH_SESSION_ID".to_owned(), session.id.0.clone()),
            ],
        };
        let live = LiveOutput::new(1);
        match host.executor.run(request, &live, cancel).await {
            Ok(outcome) => Ran {
                exit_code: outcome.exit_code,
                stdout: outcome.stdout,
                stderr: outcome.stderr,
                timed_out: outcome.timed_out,
                not_run: outcome.not_run,
            },
            Err(error) => Ran { not_run: true, stderr: error.to_string(), ..Ran::default() },
        }
    }
}

/// Whether `event` runs in a subagent's own turns: Claude Code runs neither the session's start,
/// end or prompt hooks nor `Stop` there (the parent runs `SubagentStart` and `SubagentStop`).
fn runs_in_subagents(event: Event) -> bool {
    !matches!(
        event,
        Event::SessionStart | Event::SessionEnd | Event::UserPromptSubmit | Event::Stop
    )
}

/// Whose consent a session's own consent is: a subagent has its parent's (the user answered
/// on the parent's thread, and is not asked again for each subagent).
fn consent_key(session: &Session) -> &str {
    session.parent.as_ref().map_or(&session.id.0, |parent| &parent.session_id)
}

/// A source as an arc names it.
fn source_name(source: Source) -> &'static str {
    match source {
        Source::User => "user",
        Source::Config => "config",
        Source::Project => "project",
        Source::ProjectLocal => "project_local",
        Source::Plugin => "plugin",
    }
}

fn source_of(name: &str) -> Option<Source> {
    Some(match name {
        "user" => Source::User,
        "config" => Source::Config,
        "project" => Source::Project,
        "project_local" => Source::ProjectLocal,
        "plugin" => Source::Plugin,
        _ => return None,
    })
}

/// An agent definition as an arc keeps it.
fn agent_to_arc(agent: &AgentDef) -> serde_json::Value {
    serde_json::json!({
        "name": agent.name,
        "description": agent.description,
        "prompt": agent.prompt,
        "tools": agent.tools,
        "model": agent.model,
        "source": source_name(agent.source),
        "fingerprint": agent.fingerprint,
    })
}

/// An agent definition an arc kept.
fn agent_from_arc(entry: &serde_json::Value) -> Option<AgentDef> {
    Some(AgentDef {
        name: entry["name"].as_str()?.to_owned(),
        description: entry["description"].as_str()?.to_owned(),
        prompt: entry["prompt"].as_str()?.to_owned(),
        tools: serde_json::from_value(entry["tools"].clone()).ok()?,
        model: serde_json::from_value(entry["model"].clone()).ok()?,
        source: source_of(entry["source"].as_str()?)?,
        fingerprint: serde_json::from_value(entry["fingerprint"].clone()).ok()?,
    })
}

/// A hook as an arc keeps it.
fn to_arc(hook: &HookCommand) -> serde_json::Value {
    serde_json::json!({
        "event": hook.event.as_str(),
        "matcher": hook.matcher,
        "command": hook.command,
        "timeout_s": hook.timeout.as_secs_f64(),
        "source": source_name(hook.source),
    })
}

/// A hook an arc kept.
fn from_arc(entry: &serde_json::Value) -> Option<HookCommand> {
    let source = source_of(entry["source"].as_str()?)?;
    Some(HookCommand {
        event: Event::parse(entry["event"].as_str()?)?,
        matcher: entry["matcher"].as_str()?.to_owned(),
        command: entry["command"].as_str()?.to_owned(),
        timeout: std::time::Duration::try_from_secs_f64(entry["timeout_s"].as_f64()?).ok()?,
        source,
    })
}

/// What a hook's verdict did, in words, for its card.
fn describe(verdict: &Verdict) -> Option<String> {
    let mut said = Vec::new();
    if let Some(reason) = &verdict.block {
        said.push(format!("blocked: {reason}"));
    }
    if let Some((decision, reason)) = &verdict.permission {
        let reason = if reason.is_empty() { String::new() } else { format!(" ({reason})") };
        said.push(format!("decided {}{reason}", decision.as_str()));
    }
    if verdict.updated_input.is_some() {
        said.push("rewrote the call's arguments".to_owned());
    }
    if !verdict.context.is_empty() {
        said.push("added context for the model".to_owned());
    }
    if let Some(reason) = &verdict.halt {
        said.push(format!("ended the turn: {reason}"));
    }
    (!said.is_empty()).then(|| said.join("; "))
}
