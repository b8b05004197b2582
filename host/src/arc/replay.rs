//! Replaying arcs (`hotsh replay`): each arc against a fresh agent (this executable, serving
//! ACP) with the arc's model answers scripted, its client messages played in order, and what
//! the agent sends compared with what the arc expects.
//!
//! Playing is paced by the arc: a client message (or a step) is sent once every agent message
//! the arc has before it has arrived (counted per card, after normalising), so a cancel comes
//! while the command it cancels runs, and a prompt after the previous turn's answer. Nothing
//! waits on a clock except the arc's timeout.

use super::file::{ArcFile, Entry, Step};
use super::normalize::{Groups, Normalizer, sorted};
use anyhow::Context as _;
use serde_json::{Value, json};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitCode};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// The most of one diff a report shows.
const MAX_DIFF_LINES: usize = 200;

/// How long an arc may take when its header does not say.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// What `hotsh replay` was asked to do.
#[derive(Debug)]
pub(crate) struct ReplayOptions {
    pub(crate) arcs: Vec<PathBuf>,
    /// Where the plugins to replay with are, in precedence order.
    pub(crate) plugin_dirs: Vec<PathBuf>,
    /// Rewrite the expectations of arcs that drifted.
    pub(crate) bless: bool,
    /// Write a JUnit XML report here.
    pub(crate) junit: Option<PathBuf>,
    /// Overrides every arc's timeout.
    pub(crate) timeout: Option<Duration>,
    /// The widest sandbox mode a replayed command may run under, whatever the arc chooses.
    pub(crate) max_mode: crate::sandbox::Mode,
}

/// How one arc's replay ended.
#[derive(Debug)]
enum Outcome {
    Passed,
    /// It drifted and its expectations were rewritten.
    Blessed,
    /// It drifted, could not be read, timed out, or the agent failed: the report says which.
    Failed(String),
}

/// Replays every arc (several at once) and prints one line per arc and a summary. Exit status
/// 1 when any failed.
pub(crate) fn run(options: &ReplayOptions) -> anyhow::Result<ExitCode> {
    let plugins = plugin_files(&options.plugin_dirs)?;
    let started = Instant::now();
    let workers = std::thread::available_parallelism()
        .map_or(2, std::num::NonZero::get)
        .min(options.arcs.len())
        .max(1);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                loop {
                    let index = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(arc) = options.arcs.get(index) else { break };
                    let began = Instant::now();
                    let outcome = replay_one(arc, &plugins, options)
                        .unwrap_or_else(|error| Outcome::Failed(format!("{error:#}")));
                    let took = began.elapsed();
                    print_outcome(arc, &outcome, took);
                    crate::sync::lock(&results).push((index, outcome, took));
                }
            });
        }
    });
    let mut results = results.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
    results.sort_by_key(|(index, _, _)| *index);
    let count = |f: fn(&Outcome) -> bool| results.iter().filter(|(_, o, _)| f(o)).count();
    let (passed, failed, blessed) = (
        count(|o| matches!(o, Outcome::Passed)),
        count(|o| matches!(o, Outcome::Failed(_))),
        count(|o| matches!(o, Outcome::Blessed)),
    );
    let summary = format!(
        "{} arcs: {passed} passed, {failed} failed, {blessed} blessed ({:.2} s)\n",
        results.len(),
        started.elapsed().as_secs_f64()
    );
    let _ = std::io::stdout().lock().write_all(summary.as_bytes());
    if let Some(path) = &options.junit {
        write_junit(path, &options.arcs, &results)?;
    }
    Ok(if failed == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn print_outcome(arc: &Path, outcome: &Outcome, took: Duration) {
    let took = took.as_secs_f64();
    let text = match outcome {
        Outcome::Passed => format!("ok      {} ({took:.2} s)\n", arc.display()),
        Outcome::Blessed => format!("blessed {} ({took:.2} s)\n", arc.display()),
        Outcome::Failed(report) => {
            format!("FAILED  {} ({took:.2} s)\n{}\n", arc.display(), report.trim_end())
        }
    };
    // One write per arc: parallel replays do not interleave their reports.
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(text.as_bytes());
    let _ = stdout.flush();
}

fn write_junit(
    path: &Path,
    arcs: &[PathBuf],
    results: &[(usize, Outcome, Duration)],
) -> anyhow::Result<()> {
    use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};
    let mut suite = TestSuite::new("arcs");
    for (index, outcome, took) in results {
        let status = match outcome {
            Outcome::Passed | Outcome::Blessed => TestCaseStatus::success(),
            Outcome::Failed(report) => {
                let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
                status.set_message(report.lines().next().unwrap_or("failed"));
                status.set_description(report.as_str());
                status
            }
        };
        let mut case = TestCase::new(arcs[*index].display().to_string(), status);
        case.set_classname("hotsh.replay").set_time(*took);
        suite.add_test_case(case);
    }
    let mut report = Report::new("hotsh replay");
    report.add_test_suite(suite);
    let file = std::fs::File::create(path)
        .with_context(|| format!("cannot create the JUnit report {}", path.display()))?;
    report
        .serialize(file)
        .with_context(|| format!("cannot write the JUnit report {}", path.display()))
}

/// Replays the arc at `path` and writes what the agent sent into it (`hotsh sessions export`).
pub(crate) fn fill(path: &Path, plugin_dirs: &[PathBuf]) -> anyhow::Result<()> {
    let options = ReplayOptions {
        arcs: vec![path.to_owned()],
        plugin_dirs: plugin_dirs.to_vec(),
        bless: true,
        junit: None,
        timeout: None,
        // The user's own session, replayed to fill in its expectations: as it ran.
        max_mode: crate::sandbox::Mode::DangerFullAccess,
    };
    match replay_one(path, &plugin_files(plugin_dirs)?, &options)? {
        Outcome::Passed | Outcome::Blessed => Ok(()),
        Outcome::Failed(report) => Err(anyhow::anyhow!("{report}")),
    }
}

/// The plugin files of `dirs`, by file name; a name in an earlier directory wins.
fn plugin_files(dirs: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = Vec::new();
    for dir in dirs {
        if !dir.is_dir() {
            continue;
        }
        for file in crate::plugins::candidate_files(dir) {
            if !files.iter().any(|f| f.file_name() == file.file_name()) {
                files.push(file);
            }
        }
    }
    Ok(files)
}

/// The replay of one arc: its files, its agent, and what came back.
struct Replay<'a> {
    arc: &'a ArcFile,
    dir: tempfile::TempDir,
    /// Every agent message of the arc, normalised, with its line.
    expected: Vec<(Value, usize)>,
    expect_side: Normalizer,
    /// The replay's normaliser; session ids are added as the agent makes them.
    actual_side: Normalizer,
    /// Rewrites the arc's client messages for this replay (cwds, session ids).
    to_replay: Normalizer,
    /// Maps the replay's paths and ids back to the arc's (for `--bless`).
    to_arc: Normalizer,
    /// The arc's session ids and their placeholders, in order of appearance.
    sessions: Vec<(String, String)>,
    /// Session ids the arc's client messages use that no answer in the arc gives, in order.
    unanswered_sessions: Vec<String>,
    /// The subagents' session ids of the arc, in the order the agent first named them; the
    /// replay's Nth subagent stands for the arc's Nth.
    subagents: Vec<String>,
    /// The subagents the replay's agent has named, in order.
    subagents_seen: Vec<String>,
    /// The ids of the requests the agent sent the client in the arc (a permission request),
    /// and their placeholders, in order: the replay's Nth request stands for the arc's Nth,
    /// and the client's answer is sent with the replay's id.
    agent_requests: Vec<(String, String)>,
    /// How many requests the replay's agent has sent.
    agent_requests_seen: usize,
    received: Vec<Value>,
    /// What was received, normalised and grouped as it came.
    actual: Groups,
    /// The expected messages grouped so far (those before the arc line last waited for), and
    /// how many of `expected` that is.
    prefix: Groups,
    prefix_len: usize,
    /// The arc's client requests in order: (line, id, the arc line of its answer).
    requests: Vec<(usize, Value, Option<usize>)>,
    /// How many of `requests` are known answered (those before stay answered).
    requests_answered: usize,
    /// The ids (as JSON text) the agent answered.
    answered: std::collections::HashSet<String>,
    /// What was sent and received, in order.
    journal: Vec<Journal>,
    lines: Receiver<Option<String>>,
    child: Child,
    stdin: Option<std::process::ChildStdin>,
    exited: bool,
    /// The agent asked the model more often than the arc answers.
    ran_out: bool,
    /// What went wrong besides drift (reported with it).
    problems: Vec<String>,
    deadline: Instant,
    timeout: Duration,
    /// Every client message and step of the arc was played (what is awaited then is only the
    /// agent's last messages).
    played_all: bool,
}

enum Journal {
    Sent(usize),
    Received(usize),
}

/// Why a replay stopped before the arc's end.
enum Stop {
    /// The arc's timeout passed while this was awaited.
    TimedOut(Awaited),
    /// The agent exited (or the model side ran out) while this was awaited.
    Exited(Awaited),
}

/// What a replay waits for.
#[derive(Debug, Clone, Copy)]
enum Awaited {
    /// The agent message the arc has at this line.
    Message(usize),
    /// The answer to the client request at this line.
    Answer(usize),
}

impl Awaited {
    fn line(self) -> usize {
        match self {
            Awaited::Message(line) | Awaited::Answer(line) => line,
        }
    }
}

impl std::fmt::Display for Awaited {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Awaited::Message(line) => write!(f, "the agent message of line {line}"),
            Awaited::Answer(line) => write!(f, "the answer to the request of line {line}"),
        }
    }
}

fn replay_one(
    path: &Path,
    plugins: &[PathBuf],
    options: &ReplayOptions,
) -> anyhow::Result<Outcome> {
    // The arc's timeout counts from here: reading the arc and setting the replay up are part
    // of the replay.
    let began = Instant::now();
    let arc = ArcFile::read(path)?;
    let has = |side: fn(&Entry) -> bool| arc.entries.iter().any(|(_, entry, _)| side(entry));
    let lacks =
        match (has(|e| matches!(e, Entry::Client(_))), has(|e| matches!(e, Entry::Agent(_)))) {
            (false, _) => Some("no client messages, so there is nothing to replay"),
            // A bless fills in the agent's side (as `hotsh sessions export` does).
            (true, false) if !options.bless => {
                Some("no agent messages, so there is nothing to compare")
            }
            (true, _) => None,
        };
    if let Some(lacks) = lacks {
        anyhow::bail!(
            "{}: the arc holds {lacks}; an arc needs both sides of the conversation (record one \
             with `hotsh acp --record` or `hotsh run --record`, or export a session with \
             `hotsh sessions export`)",
            path.display()
        );
    }
    let mut replay = Replay::start(&arc, plugins, options, began)?;
    let stop = replay.play(plugins);
    replay.finish();
    replay.judge(stop, options.bless)
}

impl<'a> Replay<'a> {
    fn start(
        arc: &'a ArcFile,
        plugins: &[PathBuf],
        options: &ReplayOptions,
        began: Instant,
    ) -> anyhow::Result<Self> {
        let name = arc.path.display();
        let timeout = options
            .timeout
            .or(arc.header.timeout_s.map(Duration::from_secs))
            .unwrap_or(DEFAULT_TIMEOUT);
        let deadline = began + timeout;
        let in_time = |what: &str| {
            if Instant::now() < deadline {
                return Ok(());
            }
            Err(anyhow::anyhow!(
                "{name}:1: timed out after {:.0} s while {what}",
                timeout.as_secs_f64()
            ))
        };
        let dir = tempfile::Builder::new()
            .prefix("hotsh-replay-")
            .tempdir()
            .with_context(|| format!("{name}: cannot make a directory to replay in"))?;
        let root = dir.path();
        for sub in ["plugins", "data", "config", "tmp"] {
            std::fs::create_dir(root.join(sub))?;
        }
        // The agent's configuration (found through XDG_CONFIG_HOME): commands never wider
        // than the replay allows, whatever the arc's session chooses.
        std::fs::create_dir(root.join("config/hotsh"))?;
        std::fs::write(
            root.join("config/hotsh/config.toml"),
            format!("[sandbox]\nmax_mode = \"{}\"\n", options.max_mode.as_str()),
        )?;
        for plugin in plugins {
            let file_name = plugin.file_name().unwrap_or_default();
            std::fs::copy(plugin, root.join("plugins").join(file_name))
                .with_context(|| format!("cannot copy the plugin {}", plugin.display()))?;
        }
        let mut expect_side = Normalizer::new(arc.header.any.iter().cloned());
        let mut actual_side = expect_side.clone();
        let mut to_replay = Normalizer::default();
        let mut to_arc = Normalizer::default();
        // Working directories: the first the arc names is the fixture's copy.
        let mut cwds: Vec<String> = Vec::new();
        for (_, entry, _) in &arc.entries {
            if let Entry::Client(message) = entry
                && let Some(cwd) = message["params"]["cwd"].as_str()
                && !cwds.iter().any(|c| c == cwd)
            {
                cwds.push(cwd.to_owned());
            }
        }
        for (position, recorded) in cwds.iter().enumerate() {
            let work = root.join(format!("work-{}", position + 1));
            match (&arc.header.fixture, position) {
                (Some(fixture), 0) => {
                    let from = fixture_dir(&arc.path, fixture).map_err(|why| {
                        anyhow::anyhow!("{name}:1: the fixture `{fixture}` {why}")
                    })?;
                    copy_tree(&from, &work).with_context(|| {
                        format!("{name}:1: cannot copy the fixture {}", from.display())
                    })?;
                }
                _ => std::fs::create_dir(&work)?,
            }
            let work = work.to_string_lossy().into_owned();
            let token =
                if position == 0 { "<cwd>".into() } else { format!("<cwd-{}>", position + 1) };
            expect_side.literal(recorded, &token);
            actual_side.literal(&work, &token);
            to_replay.literal(recorded, &work);
            to_arc.literal(&work, recorded);
        }
        let replay_plugins = root.join("plugins").to_string_lossy().into_owned();
        to_arc.literal(&root.to_string_lossy(), "<replay>");
        for recorded in &arc.header.plugin_dirs {
            expect_side.literal(recorded, "<plugins>");
        }
        actual_side.literal(&replay_plugins, "<plugins>");
        if let Some(recorded) = arc.header.plugin_dirs.first() {
            to_arc.literal(&replay_plugins, recorded);
        }
        // Session ids, in the order the agent's answers give them.
        let mut sessions: Vec<(String, String)> = Vec::new();
        for (_, entry, _) in &arc.entries {
            if let Entry::Agent(message) = entry
                && let Some(id) = message["result"]["sessionId"].as_str()
                && !sessions.iter().any(|(s, _)| s == id)
            {
                let token = format!("<session-{}>", sessions.len() + 1);
                expect_side.literal(id, &token);
                sessions.push((id.to_owned(), token));
            }
        }
        let mut subagents: Vec<String> = Vec::new();
        for (_, entry, _) in &arc.entries {
            if let Entry::Agent(message) = entry {
                for id in subagents_named(message) {
                    if !subagents.iter().any(|known| known == id) {
                        let token = format!("<subagent-{}>", subagents.len() + 1);
                        expect_side.literal(id, &token);
                        subagents.push(id.to_owned());
                    }
                }
            }
        }
        let mut unanswered_sessions: Vec<String> = Vec::new();
        for (_, entry, _) in &arc.entries {
            if let Entry::Client(message) = entry
                && let Some(id) = message["params"]["sessionId"].as_str()
                && !sessions.iter().any(|(s, _)| s == id)
                && !unanswered_sessions.iter().any(|s| s == id)
            {
                unanswered_sessions.push(id.to_owned());
            }
        }
        let mut agent_requests: Vec<(String, String)> = Vec::new();
        for (_, entry, _) in &arc.entries {
            if let Entry::Agent(message) = entry
                && message.get("method").is_some()
                && let Some(id) = message["id"].as_str()
            {
                let token = format!("<agent-request-{}>", agent_requests.len() + 1);
                expect_side.literal(id, &token);
                agent_requests.push((id.to_owned(), token));
            }
        }
        in_time("reading the arc")?;
        let expected = arc
            .entries
            .iter()
            .filter_map(|(line, entry, _)| match entry {
                Entry::Agent(message) => Some((expect_side.apply(message), *line)),
                _ => None,
            })
            .collect();
        in_time("reading what the arc expects")?;
        let requests = client_requests(&arc.entries);
        // The model side: each session's answers, sessions in the order they first ask.
        let mut answers: Vec<(String, Vec<Value>)> = Vec::new();
        for (_, entry, _) in &arc.entries {
            if let Entry::Model(exchange) = entry {
                match answers.iter_mut().find(|(s, _)| *s == exchange.session) {
                    Some((_, list)) => list.push(exchange.response.clone()),
                    None => {
                        answers.push((exchange.session.clone(), vec![exchange.response.clone()]))
                    }
                }
            }
        }
        // Entries of one kind, written for the agent to replay from.
        let written = |name: &str, pick: fn(&Entry) -> Option<&Value>| -> anyhow::Result<PathBuf> {
            let entries: Vec<&Value> = arc.entries.iter().filter_map(|(_, e, _)| pick(e)).collect();
            let path = root.join(name);
            std::fs::write(&path, serde_json::to_vec(&entries)?)?;
            Ok(path)
        };
        // The MCP side: what the servers answered, served again without them.
        let mcp_replay = written("mcp.json", |entry| match entry {
            Entry::Mcp(entry) => Some(entry),
            _ => None,
        })?;
        // The hooks each turn had, run again; never the replaying user's own.
        let hooks_replay = written("hooks.json", |entry| match entry {
            Entry::Hooks(entry) => Some(entry),
            _ => None,
        })?;
        let script = root.join("script.json");
        let lists: Vec<&Vec<Value>> = answers.iter().map(|(_, list)| list).collect();
        std::fs::write(&script, serde_json::to_vec(&json!({ "sessions": lists }))?)?;
        let stderr = std::fs::File::create(root.join("agent.stderr"))?;
        let mut args: Vec<std::ffi::OsString> = vec![
            "acp".into(),
            "--no-default-plugins".into(),
            "--plugin-dir".into(),
            root.join("plugins").into(),
            "--model".into(),
            format!("script:{}", script.display()).into(),
            "--data-dir".into(),
            root.join("data").into(),
            "--record".into(),
            root.join("replayed.arc").into(),
            "--mcp-replay".into(),
            mcp_replay.into(),
            "--hooks-replay".into(),
            hooks_replay.into(),
        ];
        // The scripted model tells what the recorded one did (its window, images).
        if let Some(facts) = &arc.header.model {
            args.push("--model-facts".into());
            args.push(serde_json::to_string(facts)?.into());
        }
        // Never the user's configuration or model settings: the arc says what to play.
        let env = [
            ("XDG_CONFIG_HOME", root.join("config").into()),
            ("TMPDIR", root.join("tmp").into()),
            ("HOTSH_LOG", "warn".into()),
        ];
        let mut child = crate::executor::spawn_agent(
            &args,
            root,
            &env,
            &["HOTSH_MODEL", "HOTSH_BASE_URL", "HOTSH_DATA_DIR"],
            stderr,
        )
        .context("cannot start the agent to replay against")?;
        let stdout = child.stdout.take().context("the agent has no stdout")?;
        let stdin = child.stdin.take();
        let (sender, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead as _;
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if sender.send(Some(line)).is_err() {
                    return;
                }
            }
            let _ = sender.send(None);
        });
        Ok(Self {
            arc,
            dir,
            expected,
            expect_side,
            actual_side,
            to_replay,
            to_arc,
            sessions,
            unanswered_sessions,
            subagents,
            subagents_seen: Vec::new(),
            agent_requests,
            agent_requests_seen: 0,
            received: Vec::new(),
            actual: Groups::default(),
            prefix: Groups::default(),
            prefix_len: 0,
            requests,
            requests_answered: 0,
            answered: std::collections::HashSet::new(),
            journal: Vec::new(),
            lines,
            child,
            stdin,
            exited: false,
            ran_out: false,
            problems: Vec::new(),
            deadline,
            timeout,
            played_all: false,
        })
    }

    /// Plays the arc's client messages and steps, each once the agent messages before it came.
    fn play(&mut self, plugins: &[PathBuf]) -> Option<Stop> {
        for index in 0..self.arc.entries.len() {
            let (line, entry, _) = &self.arc.entries[index];
            let line = *line;
            match entry {
                Entry::Client(message) => {
                    if let Err(stop) = self.wait_until(line) {
                        return Some(stop);
                    }
                    let message = self.to_replay.apply_literals(message);
                    self.journal.push(Journal::Sent(index));
                    self.send(&message);
                }
                Entry::Step(Step::ReloadPlugin(file)) => {
                    if let Err(stop) = self.wait_until(line) {
                        return Some(stop);
                    }
                    self.journal.push(Journal::Sent(index));
                    if let Err(error) = self.reload(plugins, file, index) {
                        self.problems.push(format!(
                            "{}:{line}: cannot replay the plugin reload: {error:#}",
                            self.arc.path.display()
                        ));
                        // What the arc has after it awaits the reload: nothing would come.
                        return None;
                    }
                }
                Entry::Agent(_) | Entry::Model(_) | Entry::Mcp(_) | Entry::Hooks(_) => {}
            }
        }
        self.played_all = true;
        self.wait_until(usize::MAX).err()
    }

    /// Waits until every expected message before arc line `line` has its match, and every
    /// client request before it its answer (unless the arc has that answer after `line`: a
    /// prompt answered only once a later cancel came).
    fn wait_until(&mut self, line: usize) -> Result<(), Stop> {
        // The expected messages before `line` join the prefix (lines only grow).
        while let Some((message, at)) =
            self.expected.get(self.prefix_len).filter(|(_, l)| *l < line)
        {
            self.prefix.push(message.clone(), Some(*at));
            self.prefix_len += 1;
        }
        loop {
            let missing = self
                .actual
                .first_missing(&self.prefix)
                .map(|g| Awaited::Message(g.line.unwrap_or(0)));
            let unanswered = self.first_unanswered(line).map(Awaited::Answer);
            let Some(awaited) = missing.or(unanswered) else { return Ok(()) };
            if self.exited || self.ran_out {
                return Err(Stop::Exited(awaited));
            }
            // However much there is to compare, the arc's time is the limit.
            if Instant::now() >= self.deadline {
                return Err(Stop::TimedOut(awaited));
            }
            match self.lines.recv_timeout(self.deadline.saturating_duration_since(Instant::now())) {
                Ok(Some(line)) => {
                    self.receive(&line);
                    // Take whatever else is waiting before comparing again.
                    while let Ok(Some(line)) = self.lines.try_recv() {
                        self.receive(&line);
                    }
                }
                Ok(None) | Err(RecvTimeoutError::Disconnected) => self.exited = true,
                Err(RecvTimeoutError::Timeout) => return Err(Stop::TimedOut(awaited)),
            }
        }
    }

    /// The line of the first client request before arc line `line` that must be answered
    /// before it and is not yet (a request the arc answers only after `line`, a prompt
    /// answered once a later cancel came, need not be).
    fn first_unanswered(&mut self, line: usize) -> Option<usize> {
        let answered = |answered: &std::collections::HashSet<String>, id: &Value| {
            answered.contains(&id.to_string())
        };
        while self
            .requests
            .get(self.requests_answered)
            .is_some_and(|(_, id, _)| answered(&self.answered, id))
        {
            self.requests_answered += 1;
        }
        self.requests[self.requests_answered..]
            .iter()
            .take_while(|(at, _, _)| *at < line)
            .find(|(_, id, answer)| {
                answer.is_none_or(|answer| answer < line) && !answered(&self.answered, id)
            })
            .map(|(at, _, _)| *at)
    }

    fn receive(&mut self, line: &str) {
        // The scripted model ran out of the arc's answers: what the arc expects next will
        // not come.
        if line.contains("has no more responses for this session") {
            self.ran_out = true;
        }
        let message: Value =
            serde_json::from_str(line).unwrap_or_else(|_| Value::String(line.to_owned()));
        // A session the agent made: the arc's id for it is in the arc's answer of the same id.
        if let (Some(actual), Some(id)) =
            (message["result"]["sessionId"].as_str(), message.get("id"))
        {
            let answered = self.arc.entries.iter().find_map(|(_, entry, _)| match entry {
                Entry::Agent(m) if m.get("id") == Some(id) => m["result"]["sessionId"].as_str(),
                _ => None,
            });
            // An arc without the answer (made by `sessions export`): the next session its
            // client messages name.
            let recorded = answered.map(str::to_owned).or_else(|| {
                (!self.unanswered_sessions.is_empty()).then(|| self.unanswered_sessions.remove(0))
            });
            let recorded = recorded.as_deref();
            let token = recorded
                .and_then(|r| self.sessions.iter().find(|(s, _)| s == r))
                .map(|(_, token)| token.clone())
                .unwrap_or_else(|| format!("<new-session-{actual}>"));
            self.actual_side.literal(actual, &token);
            if let Some(recorded) = recorded {
                self.to_replay.literal(recorded, actual);
                self.to_arc.literal(actual, recorded);
            }
        }
        // A subagent the agent opened: the arc's subagent of the same rank.
        for actual in subagents_named(&message) {
            if self.subagents_seen.iter().any(|seen| seen == actual) {
                continue;
            }
            self.subagents_seen.push(actual.to_owned());
            let rank = self.subagents_seen.len();
            self.actual_side.literal(actual, &format!("<subagent-{rank}>"));
            if let Some(recorded) = self.subagents.get(rank - 1) {
                self.to_replay.literal(recorded, actual);
                self.to_arc.literal(actual, recorded);
            }
        }
        if message.get("method").is_none()
            && let Some(id) = message.get("id")
        {
            self.answered.insert(id.to_string());
        }
        // A request of the agent's: the arc's request in its place, and the answer to it, take
        // this id.
        if message.get("method").is_some()
            && let Some(actual) = message["id"].as_str()
        {
            if let Some((recorded, token)) = self.agent_requests.get(self.agent_requests_seen) {
                self.actual_side.literal(actual, token);
                self.to_replay.literal(recorded, actual);
                self.to_arc.literal(actual, recorded);
            }
            self.agent_requests_seen += 1;
        }
        self.actual.push(self.actual_side.apply(&message), None);
        self.journal.push(Journal::Received(self.received.len()));
        self.received.push(message);
    }

    fn actual_groups(&self) -> Groups {
        Groups::of(self.received.iter().map(|m| (self.actual_side.apply(m), None)))
    }

    fn send(&mut self, message: &Value) {
        let Some(stdin) = &mut self.stdin else { return };
        let mut line = message.to_string();
        line.push('\n');
        if stdin.write_all(line.as_bytes()).and_then(|()| stdin.flush()).is_err() {
            self.exited = true;
        }
    }

    /// A new build of `file` lands. The replay has one build of each plugin, so the new one is
    /// that library with bytes appended after its end (the loader ignores them; the agent
    /// sees different content), written as a new file the way a linker writes one.
    fn reload(&self, plugins: &[PathBuf], file: &str, step: usize) -> anyhow::Result<()> {
        let source = plugins
            .iter()
            .find(|p| p.file_name().is_some_and(|n| n == file))
            .with_context(|| {
                let given: Vec<String> = plugins
                    .iter()
                    .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
                    .collect();
                format!(
                    "the arc reloads {file}, which none of the plugin directories holds (their \
                     plugins: {}); build it, or give its directory with --plugin-dir",
                    if given.is_empty() { "none".to_owned() } else { given.join(", ") }
                )
            })?;
        let dir = self.dir.path().join("plugins");
        let staged = dir.join(format!(".{file}.new"));
        let mut bytes = std::fs::read(source)?;
        bytes.extend_from_slice(format!("\0hotsh replay: rebuild {step}\0").as_bytes());
        std::fs::write(&staged, bytes)?;
        std::fs::rename(&staged, dir.join(file))?;
        Ok(())
    }

    /// Ends the agent's input, takes what it still sends, and waits for it to exit.
    fn finish(&mut self) {
        drop(self.stdin.take());
        while !self.exited {
            match self.lines.recv_timeout(self.deadline.saturating_duration_since(Instant::now())) {
                Ok(Some(line)) => self.receive(&line),
                Ok(None) | Err(_) => break,
            }
        }
        let until = Instant::now().max(self.deadline) + Duration::from_secs(5);
        loop {
            match self.child.try_wait() {
                Ok(Some(_)) | Err(_) => return,
                Ok(None) if Instant::now() >= until => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    return;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    }

    /// Compares, reports, and blesses.
    fn judge(self, stop: Option<Stop>, bless: bool) -> anyhow::Result<Outcome> {
        let name = self.arc.path.display().to_string();
        let replayed = match std::fs::read_to_string(self.dir.path().join("replayed.arc")) {
            Ok(text) => ArcFile::parse(Path::new("replayed.arc"), &text).ok(),
            Err(_) => None,
        };
        let replayed_models: Vec<super::file::ModelExchange> = replayed
            .iter()
            .flat_map(|r| r.entries.iter())
            .filter_map(|(_, e, _)| match e {
                Entry::Model(m) => Some(m.clone()),
                _ => None,
            })
            .collect();
        if let Some(ran_out) = replayed_models.iter().find(|m| {
            m.response["error"].as_str().is_some_and(|e| e.contains("has no more responses"))
        }) {
            let recorded = self.to_arc.apply_literals(&json!(ran_out.session));
            let last = self
                .arc
                .entries
                .iter()
                .rev()
                .find(|(_, e, _)| {
                    matches!(e, Entry::Model(m) if recorded.as_str() == Some(m.session.as_str()))
                })
                .map_or(1, |(l, _, _)| *l);
            let session = self.actual_side.apply(&json!(ran_out.session));
            anyhow::bail!(
                "{name}:{last}: the model side ran out before the agent was done: session {} \
                 asked the model once more after the arc's last answer for it (line {last})",
                session.as_str().unwrap_or_default()
            );
        }
        let expected = Groups::of(self.expected.iter().map(|(m, l)| (m.clone(), Some(*l))));
        let actual = self.actual_groups();
        let mut report = String::new();
        for problem in &self.problems {
            report.push_str(problem);
            report.push('\n');
        }
        // A tool the recorded model had that this replay does not offer: the replay lacks a
        // plugin, and what it shows is not what the arc is about. Never blessed.
        let lost = self.lost_tools(&replayed_models);
        if !lost.is_empty() {
            let dirs = match self.arc.header.plugin_dirs.as_slice() {
                [] => "the recording's plugin directories".to_owned(),
                dirs => dirs.join(", "),
            };
            report.push_str(&format!(
                "{name}: the arc's model was offered {} that this replay does not offer: the plugin that has {} is missing (the recording loaded plugins from {dirs}); build it, or give its directory with --plugin-dir\n",
                lost.iter().map(|t| format!("`{t}`")).collect::<Vec<_>>().join(", "),
                if lost.len() == 1 { "it" } else { "them" },
            ));
        }
        match &stop {
            Some(Stop::TimedOut(awaited)) => report.push_str(&format!(
                "{name}:{}: timed out after {:.0} s waiting for {awaited}\n",
                awaited.line(),
                self.timeout.as_secs_f64()
            )),
            Some(Stop::Exited(awaited)) => report.push_str(&format!(
                "{name}:{}: the agent exited while waiting for {awaited}\n{}",
                awaited.line(),
                self.stderr_tail()
            )),
            None => {}
        }
        let (expected_text, lines) = expected.render();
        let (actual_text, _) = actual.render();
        let mut drifted = expected_text != actual_text;
        if drifted {
            report.push_str(&diff_report(
                &name,
                "what the agent sent the client",
                &expected_text,
                &actual_text,
                &lines,
            ));
        }
        let (expected_requests, request_lines) = self.expected_requests();
        if !request_lines.is_empty() {
            let actual_requests = self.render_requests(&replayed_models);
            if expected_requests != actual_requests {
                drifted = true;
                report.push_str(&diff_report(
                    &name,
                    "what the agent sent the model",
                    &expected_requests,
                    &actual_requests,
                    &request_lines,
                ));
            }
        }
        if report.is_empty() {
            return Ok(Outcome::Passed);
        }
        // A replay that timed out before it played the whole arc has not seen what the rest
        // of the arc brings: blessing it would drop that rest.
        let cut_short = matches!(stop, Some(Stop::TimedOut(_))) && !self.played_all;
        if bless && !lost.is_empty() {
            report.push_str("not blessed: the replay lost tools the arc's model was offered\n");
        } else if bless && cut_short {
            report.push_str(
                "not blessed: the replay timed out before it had played the whole arc (raise \
                 the arc's timeout_s, or give --timeout)\n",
            );
        } else if bless && (drifted || matches!(stop, Some(Stop::TimedOut(_)))) {
            self.bless(&replayed_models)?;
            return Ok(Outcome::Blessed);
        }
        Ok(Outcome::Failed(report))
    }

    /// The tools the arc's model was offered (in its requests) that no request of the replay
    /// offered, sorted; none when the replay made no request.
    fn lost_tools(&self, replayed: &[super::file::ModelExchange]) -> Vec<String> {
        let offered = |request: &Value| -> Vec<String> {
            request["tools"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|tool| tool["name"].as_str().map(str::to_owned))
                .collect()
        };
        let now: std::collections::BTreeSet<String> =
            replayed.iter().filter_map(|m| m.request.as_ref()).flat_map(offered).collect();
        if now.is_empty() {
            return Vec::new();
        }
        // Offered, not called: a model may call a tool nobody offered (and the arc may be
        // about what the agent says then).
        let had: std::collections::BTreeSet<String> = self
            .arc
            .entries
            .iter()
            .filter_map(|(_, entry, _)| match entry {
                Entry::Model(exchange) => exchange.request.as_ref(),
                _ => None,
            })
            .flat_map(offered)
            .collect();
        had.difference(&now).cloned().collect()
    }

    /// The arc's model requests (normalised), as text, and for each text line its arc line.
    fn expected_requests(&self) -> (String, Vec<Option<usize>>) {
        let mut text = String::new();
        let mut lines = Vec::new();
        for (line, entry, _) in &self.arc.entries {
            if let Entry::Model(exchange) = entry
                && let Some(request) = &exchange.request
            {
                let session = self.expect_side.apply(&json!(exchange.session));
                push_request(
                    &mut text,
                    &mut lines,
                    &session,
                    &self.expect_side.apply(request),
                    Some(*line),
                );
            }
        }
        (text, lines)
    }

    /// The replay's model requests, those the arc has an expectation for, as text.
    fn render_requests(&self, replayed: &[super::file::ModelExchange]) -> String {
        let mut text = String::new();
        let mut lines = Vec::new();
        let mut with_request = self.arc.entries.iter().filter_map(|(_, e, _)| match e {
            Entry::Model(m) => Some(m.request.is_some()),
            _ => None,
        });
        for exchange in replayed {
            if with_request.next() == Some(false) {
                continue;
            }
            if let Some(request) = &exchange.request {
                let session = self.actual_side.apply(&json!(exchange.session));
                let request = self.actual_side.apply(request);
                push_request(&mut text, &mut lines, &session, &request, None);
            }
        }
        text
    }

    fn stderr_tail(&self) -> String {
        let text =
            std::fs::read_to_string(self.dir.path().join("agent.stderr")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = &lines[lines.len().saturating_sub(20)..];
        if tail.is_empty() {
            return String::new();
        }
        format!("the agent's last log lines:\n{}\n", tail.join("\n"))
    }

    /// Rewrites the arc with what the agent sent this time, in the places it came.
    fn bless(&self, replayed: &[super::file::ModelExchange]) -> anyhow::Result<()> {
        let mut out = String::new();
        out.push_str(&self.arc.header_line);
        out.push('\n');
        // The MCP answers are the replay's input, kept as they were.
        for (_, entry, text) in &self.arc.entries {
            if let Entry::Mcp(_) = entry {
                out.push_str(text);
                out.push('\n');
            }
        }
        let mut requests = replayed.iter().map(|m| m.request.clone());
        // What did not drift keeps its line as the arc has it: an agent message or a model
        // request equal to the arc's once both are normalised.
        let same = |expected: &Value, actual: &Value| {
            sorted(&self.expect_side.apply(expected)) == sorted(&self.actual_side.apply(actual))
        };
        let mut write_model =
            |out: &mut String, (exchange, text): (&super::file::ModelExchange, &str)| {
                let replayed = requests.next().flatten();
                if let (Some(expected), Some(actual)) = (&exchange.request, &replayed)
                    && same(expected, actual)
                {
                    out.push_str(text);
                    out.push('\n');
                    return;
                }
                let request = replayed.map(|r| self.to_arc.apply_literals(&r));
                let mut model = serde_json::Map::new();
                model.insert("session".into(), json!(exchange.session));
                if let Some(request) = request.or_else(|| exchange.request.clone()) {
                    model.insert("request".into(), request);
                }
                model.insert("response".into(), exchange.response.clone());
                out.push_str(&sorted(&json!({ "model": model })).to_string());
                out.push('\n');
            };
        // Model answers before the first client message, then each after the message it
        // followed in the arc.
        let entries = &self.arc.entries;
        let models_after = |index: Option<usize>| {
            let start = index.map_or(0, |i| i + 1);
            entries[start..]
                .iter()
                .take_while(|(_, e, _)| !matches!(e, Entry::Client(_) | Entry::Step(_)))
                .filter_map(|(_, e, text)| match e {
                    Entry::Model(m) => Some((m, text.as_str())),
                    _ => None,
                })
                .collect::<Vec<_>>()
        };
        let mut unchanged: std::collections::HashMap<String, std::collections::VecDeque<usize>> =
            std::collections::HashMap::new();
        for (message, line) in &self.expected {
            unchanged.entry(sorted(message).to_string()).or_default().push_back(*line);
        }
        let text_at: std::collections::HashMap<usize, &str> =
            entries.iter().map(|(line, _, text)| (*line, text.as_str())).collect();
        for exchange in models_after(None) {
            write_model(&mut out, exchange);
        }
        for item in &self.journal {
            match item {
                Journal::Sent(index) => {
                    out.push_str(&entries[*index].2);
                    out.push('\n');
                    for exchange in models_after(Some(*index)) {
                        write_model(&mut out, exchange);
                    }
                }
                Journal::Received(index) => {
                    let key = sorted(&self.actual_side.apply(&self.received[*index])).to_string();
                    let kept = unchanged
                        .get_mut(&key)
                        .and_then(std::collections::VecDeque::pop_front)
                        .and_then(|line| text_at.get(&line));
                    match kept {
                        Some(text) => out.push_str(text),
                        None => {
                            let message = self.to_arc.apply_literals(&self.received[*index]);
                            out.push_str(&sorted(&json!({ "agent": message })).to_string());
                        }
                    }
                    out.push('\n');
                }
            }
        }
        let staged = self.arc.path.with_extension("arc.blessing");
        std::fs::write(&staged, out)
            .with_context(|| format!("cannot write {}", staged.display()))?;
        std::fs::rename(&staged, &self.arc.path)
            .with_context(|| format!("cannot replace {}", self.arc.path.display()))?;
        Ok(())
    }
}

fn push_request(
    text: &mut String,
    lines: &mut Vec<Option<usize>>,
    session: &Value,
    request: &Value,
    line: Option<usize>,
) {
    text.push_str(&format!("# request of {}\n", session.as_str().unwrap_or_default()));
    lines.push(line);
    for part in super::normalize::pretty(request).lines() {
        text.push_str(part);
        text.push('\n');
        lines.push(line);
    }
}

/// Whether `message` is the answer (result or error) to the request with this id.
/// The arc's client requests in order: (line, id, the line of the arc's first answer to it
/// after it).
fn client_requests(entries: &[(usize, Entry, String)]) -> Vec<(usize, Value, Option<usize>)> {
    // The lines of the agent's answers, by id (as JSON text).
    let mut answers: std::collections::HashMap<String, Vec<usize>> = Default::default();
    for (at, entry, _) in entries {
        if let Entry::Agent(message) = entry
            && message.get("method").is_none()
            && let Some(id) = message.get("id")
        {
            answers.entry(id.to_string()).or_default().push(*at);
        }
    }
    entries
        .iter()
        .filter_map(|(at, entry, _)| match entry {
            Entry::Client(m) if m.get("method").is_some() => {
                let id = m.get("id")?.clone();
                let lines = answers.get(&id.to_string());
                let answer = lines.and_then(|lines| lines.iter().copied().find(|l| l > at));
                Some((*at, id, answer))
            }
            _ => None,
        })
        .collect()
}

/// A unified diff of `expected` (the arc) against `actual` (the replay), naming the arc line of
/// the first message that differs.
fn diff_report(
    name: &str,
    what: &str,
    expected: &str,
    actual: &str,
    lines: &[Option<usize>],
) -> String {
    let diff = similar::TextDiff::from_lines(expected, actual);
    let first = diff
        .ops()
        .iter()
        .find(|op| !matches!(op, similar::DiffOp::Equal { .. }))
        .map(|op| op.old_range().start);
    let line = first
        .and_then(|at| lines.get(at).or(lines.last()).copied().flatten())
        .map_or_else(String::new, |l| format!(":{l}"));
    let mut unified = diff
        .unified_diff()
        .context_radius(4)
        .header(&format!("{name} (expected)"), "replay (actual)")
        .to_string();
    let shown: Vec<&str> = unified.lines().collect();
    if shown.len() > MAX_DIFF_LINES {
        unified = format!(
            "{}\n[… {} more lines of diff …]\n",
            shown[..MAX_DIFF_LINES].join("\n"),
            shown.len() - MAX_DIFF_LINES
        );
    }
    format!("{name}{line}: {what} differs from the arc\n{unified}")
}

/// Copies a directory tree (files, directories, symbolic links).
/// The folder an arc's `fixture` names: inside the arc's own folder (a relative path without
/// `..`, and no link leading out of it), or why not.
fn fixture_dir(arc: &Path, fixture: &str) -> Result<PathBuf, String> {
    use std::path::Component;
    let relative = Path::new(fixture);
    if !relative.components().all(|c| matches!(c, Component::Normal(_) | Component::CurDir)) {
        return Err("must be a folder inside the arc's own folder (a relative path without `..`)"
            .to_owned());
    }
    let base = arc.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let base = std::fs::canonicalize(base).map_err(|e| format!("cannot be found: {e}"))?;
    let dir =
        std::fs::canonicalize(base.join(relative)).map_err(|e| format!("cannot be found: {e}"))?;
    if !dir.starts_with(&base) || !dir.is_dir() {
        return Err("must be a folder inside the arc's own folder".to_owned());
    }
    Ok(dir)
}

/// Copies a fixture: folders, regular files and links (as links); anything else (a FIFO, a
/// socket, a device) is refused rather than opened, which could wait forever.
fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        let kind = entry.file_type()?;
        if kind.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(entry.path())?, &target)?;
        } else if kind.is_file() {
            std::fs::copy(entry.path(), &target)?;
        } else {
            return Err(std::io::Error::other(format!(
                "{} is not a file, a folder or a link",
                entry.path().display()
            )));
        }
    }
    Ok(())
}

/// The subagents' session ids an agent message names: a `subagent_update`'s, and a card's
/// `session` content's.
fn subagents_named(message: &Value) -> Vec<&str> {
    let update = &message["params"]["update"];
    let mut ids = Vec::new();
    if update["sessionUpdate"] == "subagent_update"
        && let Some(id) = update["sessionId"].as_str()
    {
        ids.push(id);
    }
    for item in update["content"].as_array().into_iter().flatten() {
        if item["type"] == "session"
            && let Some(id) = item["sessionId"].as_str()
        {
            ids.push(id);
        }
    }
    ids
}
