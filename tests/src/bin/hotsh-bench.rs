//! Benchmarks of the real `hotsh` release binary. Run from the workspace root:
//!
//! ```text
//! cargo run --release -p hotsh-tests --bin hotsh-bench -- startup [RUNS]
//! ```
//!
//! ```text
//! cargo run --release -p hotsh-tests --bin hotsh-bench -- output [MIB] [RUNS]
//! cargo run --release -p hotsh-tests --bin hotsh-bench -- overhead [CALLS] [RUNS]
//! cargo run --release -p hotsh-tests --bin hotsh-bench -- tasks [COUNT] [RUNS]
//! cargo run --release -p hotsh-tests --bin hotsh-bench -- edit [CALLS] [RUNS]
//! cargo run --release -p hotsh-tests --bin hotsh-bench -- reload [RELOADS] [debug]
//! cargo run --release -p hotsh-tests --bin hotsh-bench -- sessions [EVENTS] [RUNS]
//! cargo run --release -p hotsh-tests --bin hotsh-bench -- load [EVENTS] [RUNS]
//! cargo run --release -p hotsh-tests --bin hotsh-bench -- models [TURNS] [CHUNKS]
//! cargo run --release -p hotsh-tests --bin hotsh-bench -- mcp [CALLS] [RUNS]
//! cargo run --release -p hotsh-tests --bin hotsh-bench -- slow-client [SECONDS] [RUNS]
//! cargo run --release -p hotsh-tests --bin hotsh-bench -- long [TURNS]
//! cargo run --release -p hotsh-tests --bin hotsh-bench -- long-line [MIB] [RUNS]
//! cargo run --release -p hotsh-tests --bin hotsh-bench -- subagents [TURNS]
//! cargo run --release -p hotsh-tests --bin hotsh-bench -- exit [SESSIONS] [RUNS]
//! cargo run --release -p hotsh-tests --bin hotsh-bench -- memory [RUNS]
//! ```
//!
//! `startup`: per run, spawn `hotsh` (no arguments: plugins from its own directory) and time
//! spawn → `initialize` answered, then `session/new`; read the RSS right after `initialize`,
//! and again once the plugins are loaded (after a first prompt, which waits for them).
//!
//! `output`: one foreground `bash` call writing MIB MiB (default 1024) through the whole tool
//! path, with a Zed-like client reading every update: throughput and the host's peak RSS.
//!
//! `overhead`: a turn of CALLS (default 50) foreground `true` calls through the whole tool path
//! (model script, ACP card updates, plugin, shim, bash), per call, against `bash -c true`
//! spawned directly by the benchmark (both without the `LD_LIBRARY_PATH` that `cargo run` sets).
//!
//! `edit`: `edit_file` through the whole tool path (model script, ACP cards with the diff,
//! the plugin, the host's file service, an atomic write) on a 1 KiB and a 10 MiB file, per
//! edit; the file is read once first, as the model must.
//!
//! `tasks`: one turn starting COUNT (default 200) background tasks (`sleep 600`): the time to
//! start them all and the host's RSS with all of them running.
//!
//! `reload`: RELOADS (default 30) new release builds of a plugin linked into the watched
//! directory the way cargo does it, alternating two builds: the time from the new file being
//! complete in the directory to the new generation serving (the host swaps, then sends the
//! reload card; the call made right after must be served by the new build, which is checked),
//! and the host's RSS growth per reload (generations are never unloaded).
//!
//! `sessions`: the session log. Append throughput: one turn whose answer streams EVENTS
//! (default 10000) text chunks, each logged and sent to the client (events per second, prompt
//! to answer). Turn overhead: a turn with one short answer (prompt to answer, which includes
//! writing the prompt and the turn's records and two flushes). Load: a log of EVENTS records
//! written beside the agent, then `session/load` timed from request to the last byte of the
//! answer (updates counted, not parsed), and the host's peak RSS after it; two logs: one with
//! a card every 10 records (many updates), one as a streaming model leaves it (mostly chunks,
//! joined on load). The loads right after start find the record of the plugin builds this
//! hotsh checked in their data directory (as after any earlier start); one more is timed
//! without it, as at a user's very first start (each plugin checked in a process first).
//! For the load in a settled agent, also the CPU time the agent's threads
//! spent on it (less noisy than the time on a shared machine), counted in one more load of
//! the same log whose time is not reported: its threads are sampled every half millisecond
//! meanwhile, so that a thread that ends during the load (the one reading a long log) counts.
//!
//! `load`: the loads of `sessions` with cards alone, right after start and settled, RUNS
//! (default 11) times each: the same figures with more runs, to compare builds.
//!
//! `models`: a model server on loopback streaming server-sent events. Turn overhead: TURNS
//! (default 50) turns with a one-chunk answer, prompt to answer, through the OpenAI-compatible
//! adapter and through the scripted model. Chunk delay: one answer paced chunk by chunk
//! (CHUNKS, default 300): from the server writing a chunk to the client reading its
//! `session/update`, median and p99.
//!
//! `mcp`: MCP servers (the tests' fixture over stdio, release build). `session/new` with 0, 1
//! and 5 servers given (it must not wait for them), and the first prompt after it (which waits
//! for them to connect). Per call: a turn of CALLS (default 50) calls of the server's `echo`
//! through the whole tool path (model script, cards, rmcp, the server), against the same
//! calls sent by the benchmark itself straight to the server over its pipes (the server's own
//! time, with JSON-RPC both ways).
//!
//! `slow-client`: a client that stops reading while a command prints for SECONDS (default
//! 12): the host's peak RSS, which the back-pressure toward the client bounds.
//!
//! `long`: one session of TURNS (default 600) turns through the OpenAI-compatible adapter and
//! a loopback server that does not parse what it gets (its own work stays flat), each turn a
//! `bash` call printing 4 KiB (unconfined: the sandbox's cost would hide the host's) and a
//! short answer, the window too large to compact: the turn's
//! time (prompt to answer: the host's work on both requests, the command, the cards; medians
//! of 10 turns) near turn 10 and near the end, the host's RSS there, the log's bytes per turn.
//! By default the requests clear older tool output as hotsh does by default (the newest
//! 40,000 tokens whole); `long TURNS whole` turns that off (`prune_tool_output = false`), so
//! every request carries the whole conversation.
//! Then a compaction: the same
//! session compacted with `/compact` (the model's summary is instant), prompt to answer.
//!
//! `long-line`: a model answer that is one server-sent event line of MIB MiB (default 100) of
//! text, through the OpenAI-compatible adapter (the answer bound raised to let it through):
//! prompt to answer, with the client reading every byte.
//!
//! `subagents`: TURNS (default 50) turns through the OpenAI-compatible adapter and a loopback
//! server that does not parse what it gets, unconfined (the sandbox's start would hide the
//! host's work). Each turn calls `task` (the child answers at once, then the parent), then
//! `update_plan` (hotsh's own in-process tool) as the baseline. Opening a child: from the
//! parent's `task` call written to the child's first request's connection, against from the
//! `update_plan` call written to the next request's; the difference is what opening the child
//! (its log, its history, its system prompt) costs. Memory: the host's RSS after the first
//! turns and after the last, per subagent (a child is closed when its turn ends: what stays is
//! a leak).
//!
//! `exit`: a client opens SESSIONS (default 2000) sessions, runs nothing in them, and closes
//! stdin: the time from the close to the agent's exit (its output closed and the process
//! reaped), and the host's RSS with them open.
//!
//! `memory`: in the default mode, the agent's RSS and PSS a second after `initialize` and
//! `session/new`, the PSS of its whole process tree then (`/proc/PID/smaps_rollup` of each
//! descendant), and again after a turn of 20 `true` commands.
//!
//! Every benchmark prints each run and the medians. The machine is shared and noisy: compare
//! medians, not runs.

#![allow(clippy::disallowed_methods, reason = "the benchmark builds and starts hotsh")]
#![allow(clippy::print_stdout, reason = "the benchmark reports on stdout")]

use serde_json::{Value, json};
use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("startup") => startup(number(&args, 1, 10)),
        Some("output") => output(number(&args, 1, 1024), number(&args, 2, 3)),
        Some("overhead") => overhead(number(&args, 1, 50), number(&args, 2, 5)),
        Some("tasks") => tasks(number(&args, 1, 200), number(&args, 2, 3)),
        Some("reload") => reload(number(&args, 1, 30), args.get(2).map(String::as_str)),
        Some("sessions") => sessions(number(&args, 1, 10_000), number(&args, 2, 5)),
        Some("load") => load(number(&args, 1, 10_000), number(&args, 2, 11)),
        Some("models") => models(number(&args, 1, 50), number(&args, 2, 300)),
        Some("arcs") => arcs(number(&args, 1, 5)),
        Some("card") => card(number(&args, 1, 20)),
        Some("hooks") => hooks(number(&args, 1, 20)),
        Some("edit") => edit(number(&args, 1, 20), number(&args, 2, 5)),
        Some("mcp") => mcp(number(&args, 1, 50), number(&args, 2, 5)),
        Some("slow-client") => slow_client(number(&args, 1, 12), number(&args, 2, 3)),
        Some("long") => long(number(&args, 1, 600), args.get(2).is_some_and(|a| a == "whole")),
        Some("toolcall") => toolcall(number(&args, 1, 50)),
        Some("subagents") => subagents(number(&args, 1, 50)),
        Some("exit") => exit(number(&args, 1, 2000), number(&args, 2, 3)),
        Some("long-line") => long_line(number(&args, 1, 100), number(&args, 2, 3)),
        Some("memory") => memory(number(&args, 1, 3)),
        _ => {
            eprintln!(
                "usage: hotsh-bench (startup [RUNS] | output [MIB] [RUNS] | overhead [CALLS] [RUNS] | tasks [COUNT] [RUNS] | reload [RELOADS] [debug] | sessions [EVENTS] [RUNS] | load [EVENTS] [RUNS] | models [TURNS] [CHUNKS] | arcs [RUNS] | card [TURNS] | hooks [TURNS] | edit [CALLS] [RUNS] | mcp [CALLS] [RUNS] | slow-client [SECONDS] [RUNS] | long [TURNS] [whole] | toolcall [TURNS] | long-line [MIB] [RUNS] | subagents [TURNS] | exit [SESSIONS] [RUNS] | memory [RUNS])"
            );
            std::process::exit(2);
        }
    }
}

fn number(args: &[String], at: usize, default: usize) -> usize {
    args.get(at).map_or(default, |n| n.parse().expect("a number"))
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// A `hotsh acp` with a scripted model, driven like an editor would.
struct Agent {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: BufReader<std::process::ChildStdout>,
    next_id: u64,
    _dir: tempfile::TempDir,
    session: Value,
}

impl Agent {
    /// An agent whose model is given by `model_args` (e.g. `--model openai:x --base-url …`).
    fn start_with_model(hotsh: &std::path::Path, model_args: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        Self::launch(dir, hotsh, model_args.iter().map(OsString::from).collect())
    }

    fn start(hotsh: &std::path::Path, responses: Vec<Value>, config: &str) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        Self::start_in(dir, hotsh, responses, config, None)
    }

    fn start_in(
        dir: tempfile::TempDir,
        hotsh: &std::path::Path,
        responses: Vec<Value>,
        config: &str,
        plugin_dir: Option<&std::path::Path>,
    ) -> Self {
        let script = dir.path().join("script.json");
        std::fs::write(&script, json!({ "responses": responses }).to_string()).expect("script");
        let config_path = dir.path().join("config.toml");
        std::fs::write(&config_path, config).expect("config");
        let mut args: Vec<OsString> = Vec::new();
        if let Some(plugin_dir) = plugin_dir {
            args.extend(["--plugin-dir".into(), plugin_dir.into()]);
        }
        args.extend(["--model".into(), format!("script:{}", script.display()).into()]);
        args.extend(["--config".into(), config_path.into()]);
        Self::launch(dir, hotsh, args)
    }

    /// Starts `hotsh acp ARGS` in `dir` (its temp and data directory), then `initialize` and
    /// `session/new`.
    fn launch(dir: tempfile::TempDir, hotsh: &std::path::Path, args: Vec<OsString>) -> Self {
        // `HOTSH_BENCH_LAYOUT=apart`: the session's folder and the temp dir apart from the
        // agent's data and configuration (as a user's are), not one directory for all;
        // `repo`: the same, the folder a git repository (as most are: its `.git` is mounted
        // read-only for every confined command).
        let layout = std::env::var("HOTSH_BENCH_LAYOUT").unwrap_or_default();
        let (work, tmp) = if layout == "apart" || layout == "repo" {
            let (work, tmp) = (dir.path().join("work"), dir.path().join("tmp"));
            std::fs::create_dir_all(&work).expect("work dir");
            std::fs::create_dir_all(&tmp).expect("temp dir");
            if layout == "repo" {
                std::fs::create_dir_all(work.join(".git")).expect(".git");
            }
            (work, tmp)
        } else {
            (dir.path().to_owned(), dir.path().to_owned())
        };
        let mut child = Command::new(hotsh)
            .arg("acp")
            .args(args)
            .env("HOTSH_LOG", "warn")
            .env("TMPDIR", &tmp)
            // Never the developer's installed plugins, sessions or key.
            .env("HOTSH_DATA_DIR", dir.path().join("data"))
            .env_remove("HOTSH_API_KEY")
            // `cargo run` sets it for the benchmark; an agent Zed starts does not have it, and
            // every program a command starts would search it for its libraries.
            .env_remove("LD_LIBRARY_PATH")
            .current_dir(dir.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("hotsh starts");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut agent = Self { child, stdin, stdout, next_id: 1, _dir: dir, session: Value::Null };
        agent.ask("initialize", json!({"protocolVersion": 1, "clientCapabilities": {"_meta": {"terminal_output": true}}}));
        let cwd = work;
        agent.session =
            agent.ask("session/new", json!({"cwd": cwd, "mcpServers": []}))["result"]["sessionId"]
                .clone();
        agent
    }

    /// Reads and parses the next message from hotsh.
    fn read_message(&mut self) -> Value {
        let mut line = String::new();
        assert!(self.stdout.read_line(&mut line).expect("read") > 0, "hotsh closed stdout");
        serde_json::from_str(&line).expect("JSON")
    }

    /// Sends a request and returns its response and the messages received before it.
    fn request(&mut self, method: &str, params: Value) -> (Value, Vec<Value>) {
        let id = self.next_id;
        self.next_id += 1;
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(self.stdin, "{line}").expect("write");
        self.stdin.flush().expect("flush");
        let mut seen = Vec::new();
        loop {
            let message = self.read_message();
            if message["id"] == id && message.get("method").is_none() {
                return (message, seen);
            }
            seen.push(message);
        }
    }

    fn ask(&mut self, method: &str, params: Value) -> Value {
        self.request(method, params).0
    }

    /// Reads messages until the answer to request `id`.
    fn wait_response(&mut self, id: u64) -> Value {
        loop {
            let message = self.read_message();
            if message["id"] == id && message.get("method").is_none() {
                return message;
            }
        }
    }

    /// Reads messages until a notification satisfies `matches`.
    fn wait_notification(&mut self, matches: impl Fn(&Value) -> bool) -> Value {
        loop {
            let message = self.read_message();
            if message.get("method").is_some() && matches(&message) {
                return message;
            }
        }
    }

    /// Sends a prompt and returns its response and the notifications before it.
    fn prompt_collecting(&mut self, text: &str) -> (Value, Vec<Value>) {
        let session = self.session.clone();
        self.request(
            "session/prompt",
            json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]}),
        )
    }

    fn prompt(&mut self, text: &str) -> Value {
        self.prompt_collecting(text).0
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn finish(mut self) {
        drop(self.stdin);
        let _ = self.child.wait();
    }

    /// Closes stdin and waits until hotsh closed its output and exited: how long that took.
    fn time_exit(mut self) -> Duration {
        let started = Instant::now();
        drop(self.stdin);
        let mut rest = Vec::new();
        let _ = std::io::Read::read_to_end(&mut self.stdout, &mut rest);
        let _ = self.child.wait();
        started.elapsed()
    }
}

fn exit(sessions: usize, runs: usize) {
    let hotsh = release_dir().join("hotsh");
    let mut times = Vec::new();
    for run in 1..=runs {
        let mut agent = Agent::start(&hotsh, vec![json!({"text": "ok"})], "");
        let cwd = agent._dir.path().to_owned();
        // Sent all at once, then answered: as a client restoring many threads.
        let first = agent.next_id;
        for id in first..first + sessions as u64 {
            let line = json!({"jsonrpc": "2.0", "id": id, "method": "session/new",
                "params": {"cwd": cwd, "mcpServers": []}});
            writeln!(agent.stdin, "{line}").expect("write");
        }
        agent.stdin.flush().expect("flush");
        agent.next_id += sessions as u64;
        let mut answered = 0;
        while answered < sessions {
            let message = agent.read_message();
            if message.get("method").is_none() {
                assert!(message.get("result").is_some(), "{message}");
                answered += 1;
            }
        }
        let rss = rss_kib(agent.pid());
        let took = ms(agent.time_exit());
        println!(
            "run {run}: {sessions} sessions open (RSS {rss} KiB); exit after stdin EOF {took:.1} ms"
        );
        times.push(took);
    }
    println!("{sessions} open sessions, exit after stdin EOF: median {:.1} ms", median(times));
}

fn output(mib: usize, runs: usize) {
    let hotsh = release_dir().join("hotsh");
    let bytes = mib << 20;
    let command = format!("yes hotsh-benchmark-output-line | head -c {bytes}");
    let mut rates = Vec::new();
    let mut peaks = Vec::new();
    for run in 1..=runs {
        let mut agent = one_command(&hotsh, &command);
        let started = Instant::now();
        agent.prompt("flood");
        let seconds = started.elapsed().as_secs_f64();
        let rate = bytes as f64 / seconds / 1e6;
        let peak = proc_status_kib(agent.pid(), "VmHWM:") as f64 / 1024.0;
        println!(
            "run {run}: {mib} MiB in {seconds:.2} s = {rate:.0} MB/s; host peak RSS {peak:.1} MiB"
        );
        rates.push(rate);
        peaks.push(peak);
        agent.finish();
    }
    println!(
        "median of {runs} runs: {:.0} MB/s through bash, host peak RSS {:.1} MiB",
        median(rates),
        median(peaks)
    );
}

/// An agent whose model runs `command` once, then says it is done.
fn one_command(hotsh: &std::path::Path, command: &str) -> Agent {
    let responses = vec![
        json!({"tool_calls": [{"name": "bash", "arguments": {"command": command}}]}),
        json!({"text": "done"}),
    ];
    Agent::start(hotsh, responses, "")
}

/// `slow-client`: a command prints as fast as it can for SECONDS while the client reads
/// nothing (it sleeps SECONDS + 1 s after sending the prompt), then reads everything. Reports
/// the host's peak RSS (the bound on what a client that falls behind costs) and the time from
/// the prompt to its answer.
fn slow_client(seconds: usize, runs: usize) {
    let hotsh = release_dir().join("hotsh");
    let command = format!(
        "end=$((SECONDS+{seconds})); while [ $SECONDS -lt $end ]; do yes hotsh-benchmark-slow-client | head -c 4M; done"
    );
    let mut peaks = Vec::new();
    for run in 1..=runs {
        let mut agent = one_command(&hotsh, &command);
        let session = agent.session.clone();
        let started = Instant::now();
        let line = json!({"jsonrpc": "2.0", "id": 999, "method": "session/prompt",
            "params": {"sessionId": session, "prompt": [{"type": "text", "text": "flood"}]}});
        writeln!(agent.stdin, "{line}").expect("write");
        agent.stdin.flush().expect("flush");
        std::thread::sleep(Duration::from_secs(seconds as u64 + 1));
        let blocked = proc_status_kib(agent.pid(), "VmHWM:") as f64 / 1024.0;
        while agent.read_message()["id"] != 999 {}
        let answered = started.elapsed().as_secs_f64();
        let peak = proc_status_kib(agent.pid(), "VmHWM:") as f64 / 1024.0;
        println!(
            "run {run}: host peak RSS {peak:.1} MiB ({blocked:.1} MiB while unread); answered after {answered:.2} s"
        );
        peaks.push(peak);
        agent.finish();
    }
    println!("median of {runs} runs: host peak RSS {:.1} MiB", median(peaks));
}

fn overhead(calls: usize, runs: usize) {
    let hotsh = release_dir().join("hotsh");
    let mut setups = vec![
        ("unconfined", "[sandbox]\nmode = \"danger-full-access\"\n"),
        ("landlock", "[sandbox]\nbackend = \"landlock\"\n"),
    ];
    if Command::new("bwrap").arg("--version").output().is_ok_and(|o| o.status.success()) {
        setups.push(("bwrap", "[sandbox]\nbackend = \"bwrap\"\n"));
    }
    // `HOTSH_BENCH_SETUPS=landlock,bwrap`: only those (to compare builds on one backend).
    if let Ok(only) = std::env::var("HOTSH_BENCH_SETUPS") {
        setups.retain(|(name, _)| only.split(',').any(|wanted| wanted == *name));
    }
    let mut summary = Vec::new();
    for (name, config) in setups {
        let mut through_tool = Vec::new();
        let mut direct = Vec::new();
        let mut first = Vec::new();
        for run in 1..=runs {
            let tool_calls: Vec<Value> = (0..calls)
                .map(|_| json!({"name": "bash", "arguments": {"command": "true"}}))
                .collect();
            // A first turn with one command, not timed: the agent's first prompt waits for its
            // plugin scan (about 20 ms), which is start-up, not the cost of a command.
            let responses = vec![
                json!({"tool_calls": [{"name": "bash", "arguments": {"command": "true"}}]}),
                json!({"text": "warm"}),
                json!({ "tool_calls": tool_calls }),
                json!({"text": "done"}),
            ];
            let mut agent = Agent::start(&hotsh, responses, config);
            let started = Instant::now();
            agent.prompt("warm up");
            let first_prompt = ms(started.elapsed());
            let started = Instant::now();
            agent.prompt("go");
            let per_call = ms(started.elapsed()) / calls as f64;
            agent.finish();
            let started = Instant::now();
            for _ in 0..calls {
                let status = Command::new("bash")
                    .args(["-c", "true"])
                    .env_remove("LD_LIBRARY_PATH")
                    .status()
                    .expect("bash runs");
                assert!(status.success());
            }
            let per_spawn = ms(started.elapsed()) / calls as f64;
            println!(
                "{name} run {run}: {per_call:.2} ms per `true` through the tool path, {per_spawn:.2} ms per `bash -c true` spawned directly; the session's first prompt (one `true`, and the plugin scan) {first_prompt:.2} ms"
            );
            first.push(first_prompt);
            through_tool.push(per_call);
            direct.push(per_spawn);
        }
        let (tool, bash, first) = (median(through_tool), median(direct), median(first));
        summary.push(format!(
            "{name}: median of {runs} runs: {tool:.2} ms through the tool path vs {bash:.2} ms direct: {:.2} ms of overhead per command; first prompt of a session {first:.2} ms",
            tool - bash
        ));
    }
    for line in summary {
        println!("{line}");
    }
}

/// Scripted turns running one command (`true`, and `echo x; uname -s`: one with output),
/// unconfined and under the default sandbox: prompt to the card's closing update, and prompt
/// to the answer.
fn card(turns: usize) {
    let setups =
        [("unconfined", "[sandbox]\nmode = \"danger-full-access\"\n"), ("default sandbox", "")];
    let mut summary = Vec::new();
    for (setup, config) in setups {
        for command in ["true", "echo x; uname -s"] {
            let (closed, answered) = card_turns(turns, command, config);
            summary.push(format!(
                "{setup}, `{command}`: median of {turns} turns: card closed {closed:.2} ms, answer {answered:.2} ms after the prompt"
            ));
        }
    }
    for line in summary {
        println!("{line}");
    }
}

/// Scripted turns running `true` under the default sandbox, with no hook and with one
/// `PreToolUse` hook (`true`, from the config: the user's own, unconfined): what a hook costs
/// a call.
fn hooks(turns: usize) {
    let hook = "[[hooks.PreToolUse]]\nmatcher = \"Bash\"\nhooks = [{ type = \"command\", command = \"true\" }]\n";
    let mut summary = Vec::new();
    for (setup, config) in [("no hooks", ""), ("one PreToolUse hook", hook)] {
        let (closed, answered) = card_turns(turns, "true", config);
        summary.push(format!(
            "{setup}: median of {turns} turns: card closed {closed:.2} ms, answer {answered:.2} ms after the prompt"
        ));
    }
    for line in summary {
        println!("{line}");
    }
}

/// Medians of `turns` scripted turns running `command`: prompt to the card's closing update,
/// prompt to the answer.
fn card_turns(turns: usize, command: &str, config: &str) -> (f64, f64) {
    let hotsh = release_dir().join("hotsh");
    let mut responses = Vec::new();
    for _ in 0..=turns {
        responses
            .push(json!({"tool_calls": [{"name": "bash", "arguments": {"command": command}}]}));
        responses.push(json!({"text": "done"}));
    }
    let mut agent = Agent::start(&hotsh, responses, config);
    agent.prompt("warm up");
    let (mut closed, mut answered) = (Vec::new(), Vec::new());
    for turn in 1..=turns {
        let id = agent.next_id;
        agent.next_id += 1;
        let session = agent.session.clone();
        let line = json!({"jsonrpc": "2.0", "id": id, "method": "session/prompt",
            "params": {"sessionId": session, "prompt": [{"type": "text", "text": "go"}]}});
        let started = Instant::now();
        writeln!(agent.stdin, "{line}").expect("write");
        agent.stdin.flush().expect("flush");
        let mut card_closed = None;
        loop {
            let message = agent.read_message();
            let update = &message["params"]["update"];
            if update["sessionUpdate"] == "tool_call_update" && update["status"] == "completed" {
                card_closed = Some(ms(started.elapsed()));
            }
            if message["id"] == id && message.get("method").is_none() {
                break;
            }
        }
        let answer = ms(started.elapsed());
        let card = card_closed.expect("the card closed");
        println!(
            "`{command}` turn {turn}: card closed after {card:.2} ms, answer after {answer:.2} ms"
        );
        closed.push(card);
        answered.push(answer);
    }
    agent.finish();
    (median(closed), median(answered))
}

/// `edit_file` through the whole tool path on a 1 KiB and a 10 MiB file: one turn reads the
/// file, the next makes CALLS edits (a marker in the middle, toggled), timed per edit.
fn edit(calls: usize, runs: usize) {
    let hotsh = release_dir().join("hotsh");
    for (label, size) in [("1 KiB", 1usize << 10), ("10 MiB", 10 << 20)] {
        let mut per_edit = Vec::new();
        for run in 1..=runs {
            let edits: Vec<Value> = (0..calls)
                .map(|i| {
                    let (old, new) =
                        if i.is_multiple_of(2) { ("MARKER-A", "MARKER-B") } else { ("MARKER-B", "MARKER-A") };
                    json!({"name": "edit_file", "arguments": {"path": "file.txt", "old_string": old, "new_string": new}})
                })
                .collect();
            let responses = vec![
                json!({"tool_calls": [{"name": "read_file", "arguments": {"path": "file.txt"}}]}),
                json!({"text": "read"}),
                json!({ "tool_calls": edits }),
                json!({"text": "done"}),
            ];
            let mut agent = Agent::start(&hotsh, responses, "");
            let file = agent._dir.path().join("file.txt");
            let mut text = String::with_capacity(size + 64);
            let mut line = 0;
            while text.len() < size {
                line += 1;
                if line == 8 {
                    text.push_str("MARKER-A\n");
                }
                text.push_str(&format!("line {line} of a file the benchmark edits\n"));
            }
            std::fs::write(&file, &text).expect("the file");
            agent.prompt("read it");
            let started = Instant::now();
            agent.prompt("edit it");
            let each = ms(started.elapsed()) / calls as f64;
            let after = std::fs::read_to_string(&file).expect("the edited file");
            let expected = if calls.is_multiple_of(2) { "MARKER-A" } else { "MARKER-B" };
            assert!(
                after.contains(expected) && after.len() == text.len(),
                "the edits did not all apply"
            );
            println!("{label} run {run}: {each:.2} ms per edit_file");
            per_edit.push(each);
            agent.finish();
        }
        println!(
            "{label}: median of {runs} runs: {:.2} ms per edit_file through the tool path",
            median(per_edit)
        );
    }
}

fn mcp(calls: usize, runs: usize) {
    let hotsh = release_dir().join("hotsh");
    let server = hotsh_tests::mcp_fixture_binary(hotsh_tests::Profile::Release);
    let servers = |count: usize| -> Value {
        (0..count)
            .map(|i| json!({"name": format!("s{i}"), "command": server, "args": [format!("s{i}")], "env": []}))
            .collect()
    };
    for count in [0, 1, 5] {
        let (mut new, mut first) = (Vec::new(), Vec::new());
        for run in 1..=runs {
            let mut agent = Agent::start(&hotsh, vec![json!({"text": "ok"})], "");
            let cwd = agent._dir.path().to_owned();
            let started = Instant::now();
            let answer =
                agent.ask("session/new", json!({"cwd": cwd, "mcpServers": servers(count)}));
            let took_new = ms(started.elapsed());
            agent.session = answer["result"]["sessionId"].clone();
            let started = Instant::now();
            agent.prompt("hello");
            let took_first = ms(started.elapsed());
            println!(
                "{count} servers, run {run}: session/new {took_new:.2} ms, first prompt {took_first:.1} ms"
            );
            new.push(took_new);
            first.push(took_first);
            agent.finish();
        }
        println!(
            "{count} servers: median of {runs} runs: session/new {:.2} ms, first prompt (waits for the servers) {:.1} ms",
            median(new),
            median(first)
        );
    }
    let (mut through, mut direct) = (Vec::new(), Vec::new());
    for run in 1..=runs {
        let echo = json!({"name": "mcp__s0__echo", "arguments": {"text": "x"}});
        let responses = vec![
            json!({"text": "connected"}),
            json!({ "tool_calls": vec![echo; calls] }),
            json!({"text": "done"}),
        ];
        let mut agent = Agent::start(&hotsh, responses, "");
        let cwd = agent._dir.path().to_owned();
        let answer = agent.ask("session/new", json!({"cwd": cwd, "mcpServers": servers(1)}));
        agent.session = answer["result"]["sessionId"].clone();
        agent.prompt("connect");
        let started = Instant::now();
        agent.prompt("call it");
        let each = ms(started.elapsed()) / calls as f64;
        agent.finish();
        let own = server_own_time(&server, calls);
        println!(
            "run {run}: {each:.3} ms per call through hotsh, {own:.3} ms straight to the server"
        );
        through.push(each);
        direct.push(own);
    }
    let (through, direct) = (median(through), median(direct));
    println!(
        "median of {runs} runs: {through:.3} ms per MCP call through the tool path, {direct:.3} ms straight to the server: overhead {:.3} ms",
        through - direct
    );
}

/// The time per `tools/call` of `echo` sent straight to the server over its pipes.
fn server_own_time(server: &std::path::Path, calls: usize) -> f64 {
    let mut child = Command::new(server)
        .arg("direct")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the server starts");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut exchange = |message: Value| -> Value {
        writeln!(stdin, "{message}").expect("write");
        stdin.flush().expect("flush");
        let mut line = String::new();
        stdout.read_line(&mut line).expect("read");
        serde_json::from_str(&line).expect("JSON")
    };
    exchange(
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}}),
    );
    let started = Instant::now();
    for id in 1..=calls {
        let answer = exchange(
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "x"}}}),
        );
        assert_eq!(answer["result"]["content"][0]["text"], "direct says: x");
    }
    let each = ms(started.elapsed()) / calls as f64;
    drop(stdin);
    let _ = child.wait();
    each
}

fn tasks(count: usize, runs: usize) {
    let hotsh = release_dir().join("hotsh");
    let config = format!("[executor]\nmax_background_tasks = {count}\n");
    let mut times = Vec::new();
    let mut rss = Vec::new();
    for run in 1..=runs {
        let tool_calls: Vec<Value> = (0..count)
            .map(|_| json!({"name": "bash", "arguments": {"command": "sleep 600", "run_in_background": true}}))
            .collect();
        let responses = vec![json!({ "tool_calls": tool_calls }), json!({"text": "done"})];
        let mut agent = Agent::start(&hotsh, responses, &config);
        let started = Instant::now();
        agent.prompt("start them");
        let took = ms(started.elapsed());
        let resident = proc_status_kib(agent.pid(), "VmRSS:") as f64 / 1024.0;
        println!(
            "run {run}: {count} background tasks started in {took:.0} ms; host RSS {resident:.1} MiB"
        );
        times.push(took);
        rss.push(resident);
        agent.finish();
    }
    println!(
        "median of {runs} runs: {count} tasks started in {:.0} ms, host RSS {:.1} MiB",
        median(times),
        median(rss)
    );
}

fn reload(reloads: usize, profile: Option<&str>) {
    use hotsh_tests::{Interface, Profile, install_like_cargo, reloadable_build_in};
    let hotsh = release_dir().join("hotsh");
    // Release builds of the plugin by default; `debug`: what a plugin author's loop loads.
    let profile = match profile {
        None | Some("release") => Profile::Release,
        Some("debug") => Profile::Debug,
        Some(other) => panic!("reload builds `release` or `debug` plugins, not {other:?}"),
    };
    let builds = [
        reloadable_build_in(profile, "bench-a", Interface::Same),
        reloadable_build_in(profile, "bench-b", Interface::Same),
    ];
    let dir = tempfile::tempdir().expect("temp dir");
    let plugins = dir.path().join("plugins");
    std::fs::create_dir_all(&plugins).expect("plugin dir");
    install_like_cargo(&builds[0], &plugins, "libhotsh_fixture_reloadable.so");
    let mut responses = Vec::new();
    // One more call than reloads: the first waits for the initial scan.
    for _ in 0..=reloads {
        responses.push(json!({"tool_calls": [{"name": "reloadable_build", "arguments": {}}]}));
        responses.push(json!({"text": "ok"}));
    }
    let mut agent = Agent::start_in(dir, &hotsh, responses, "", Some(&plugins));
    agent.prompt("warm up");
    let mut latencies = Vec::new();
    let rss_before = proc_status_kib(agent.pid(), "VmRSS:");
    let anon_before = proc_status_kib(agent.pid(), "RssAnon:");
    for round in 0..reloads {
        let next = (round + 1) % 2;
        let linked_at = Instant::now();
        install_like_cargo(&builds[next], &plugins, "libhotsh_fixture_reloadable.so");
        agent.wait_notification(|m| {
            m["params"]["update"]["title"]
                .as_str()
                .is_some_and(|t| t.starts_with("Plugin reloadable reloaded"))
        });
        let latency = ms(linked_at.elapsed());
        let (_, seen) = agent.prompt_collecting("which build?");
        let served = seen
            .iter()
            .filter_map(|m| m["params"]["update"]["rawOutput"]["build"].as_str())
            .next_back()
            .expect("the call's result");
        let expected = if next == 0 { "bench-a" } else { "bench-b" };
        assert_eq!(served, expected, "round {round}: the call was not served by the new build");
        println!(
            "reload {:>2}: {latency:>6.2} ms from the file in place to the new build serving",
            round + 1
        );
        latencies.push(latency);
    }
    let rss_after = proc_status_kib(agent.pid(), "VmRSS:");
    let max = latencies.iter().copied().fold(0.0, f64::max);
    let growth = (rss_after as f64 - rss_before as f64) / 1024.0 / reloads as f64;
    println!(
        "over {reloads} reloads: median {:.2} ms, max {max:.2} ms; RSS {:.1} -> {:.1} MiB, {growth:.2} MiB per reload",
        median(latencies),
        rss_before as f64 / 1024.0,
        rss_after as f64 / 1024.0
    );
    // What a reload costs in all: the private copy (shared memory, in the RSS only where it
    // is mapped and touched) and the process's own memory (relocated data, the heap).
    let copies = hotsh_tests::private_copies(agent.pid());
    let (size, held) = copies.iter().fold((0, 0), |(s, h), (_, size, held)| (s + size, h + held));
    let per_build = held as f64 / 1048576.0 / copies.len().max(1) as f64;
    let anon = (proc_status_kib(agent.pid(), "RssAnon:") as f64 - anon_before as f64)
        / 1024.0
        / reloads as f64;
    println!(
        "private copies of the {} builds loaded: {:.1} MiB held in memory of {:.1} MiB of files ({per_build:.2} MiB per build); anonymous memory {anon:.2} MiB per reload; in all about {:.2} MiB per reload",
        copies.len(),
        held as f64 / 1048576.0,
        size as f64 / 1048576.0,
        per_build + anon
    );
    agent.finish();
}

/// `hotsh replay tests/arcs` with the release build, RUNS times: the time of each arc (as
/// replay reports it, arcs replaying two at a time) and of the whole set.
fn arcs(runs: usize) {
    let release = release_dir();
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned()))
        .args(["build", "--release", "-p", "hotsh-plugin-hello"])
        .current_dir(hotsh_tests::workspace())
        .status()
        .expect("cargo runs");
    assert!(status.success(), "release build of the hello plugin failed");
    let dir = tempfile::tempdir().expect("temp dir");
    for plugin in ["libhotsh_tool_bash.so", "libhotsh_tool_fs.so", "libhotsh_plugin_hello.so"] {
        std::os::unix::fs::symlink(release.join(plugin), dir.path().join(plugin)).expect("link");
    }
    let arcs = hotsh_tests::workspace().join("tests/arcs");
    let mut per_arc: std::collections::BTreeMap<String, Vec<f64>> = Default::default();
    let mut totals = Vec::new();
    for run in 0..runs {
        let started = Instant::now();
        let output = Command::new(release.join("hotsh"))
            .args(["replay", "--no-default-plugins", "--plugin-dir"])
            .arg(dir.path())
            .arg(&arcs)
            .output()
            .expect("hotsh replay runs");
        let total = ms(started.elapsed());
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "replay failed:\n{stdout}");
        for line in stdout.lines().filter(|l| l.starts_with("ok ")) {
            // `ok      PATH (0.41 s)`
            let (path, took) = line["ok".len()..].trim().rsplit_once(" (").expect("a timing");
            let seconds: f64 = took.trim_end_matches(" s)").parse().expect("seconds");
            let name = path.rsplit('/').next().unwrap_or(path).to_owned();
            per_arc.entry(name).or_default().push(seconds * 1000.0);
        }
        println!("run {}: whole set {total:.0} ms", run + 1);
        totals.push(total);
    }
    for (name, times) in per_arc {
        println!("{name}: median {:.0} ms", median(times));
    }
    println!("whole tests/arcs set: median {:.0} ms over {runs} runs", median(totals));
}

/// Builds the release binary and plugin; returns the directory holding them.
/// The release build of this checkout, or `$HOTSH_BENCH_DIR` (a directory holding another
/// build's `hotsh`, `hotsh-shim` and plugins), to compare two builds side by side.
fn release_dir() -> PathBuf {
    match std::env::var_os("HOTSH_BENCH_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => hotsh_tests::build_packages(hotsh_tests::Profile::Release, &[]),
    }
}

struct Sample {
    initialize: Duration,
    session_new: Duration,
    /// From `initialize` answered to the end of the initial plugin scan (its log line read).
    plugins_ready: Duration,
    rss_after_initialize_kib: u64,
    rss_plugins_loaded_kib: u64,
}

fn startup(runs: usize) {
    let dir = release_dir();
    let hotsh = dir.join("hotsh");
    let cwd = std::env::temp_dir();
    let mut samples = Vec::new();
    for run in 1..=runs {
        let sample = one_startup(&hotsh, &cwd);
        println!(
            "run {run:>2}: initialize {:>6.2} ms  session/new {:>6.2} ms  plugins ready {:>6.2} ms  RSS after initialize {:>6.1} MiB  with plugins loaded {:>6.1} MiB",
            ms(sample.initialize),
            ms(sample.session_new),
            ms(sample.plugins_ready),
            sample.rss_after_initialize_kib as f64 / 1024.0,
            sample.rss_plugins_loaded_kib as f64 / 1024.0,
        );
        samples.push(sample);
    }
    let median = |f: &dyn Fn(&Sample) -> f64| median(samples.iter().map(f).collect());
    println!("median of {runs} runs ({}):", hotsh.display());
    println!("  spawn -> initialize answered: {:.2} ms", median(&|s| ms(s.initialize)));
    println!("  session/new:                  {:.2} ms", median(&|s| ms(s.session_new)));
    println!(
        "  initialize -> the initial plugin scan done:                {:.2} ms",
        median(&|s| ms(s.plugins_ready))
    );
    println!(
        "  RSS after initialize:         {:.1} MiB",
        median(&|s| s.rss_after_initialize_kib as f64 / 1024.0)
    );
    println!(
        "  RSS with plugins loaded:      {:.1} MiB",
        median(&|s| s.rss_plugins_loaded_kib as f64 / 1024.0)
    );
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

fn one_startup(hotsh: &std::path::Path, cwd: &std::path::Path) -> Sample {
    let started = Instant::now();
    let mut child = Command::new(hotsh)
        .env("HOTSH_LOG", "warn,hotsh_host::plugins=info")
        .env("HOTSH_DATA_DIR", cwd.join("data"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("hotsh starts");
    let pid = child.id();
    // The moment the log says the initial plugin scan is done.
    let log = BufReader::new(child.stderr.take().expect("stderr"));
    let scanned = std::thread::spawn(move || {
        log.lines()
            .map_while(Result::ok)
            .find(|line| line.contains("initial plugin scan done"))
            .map(|_| Instant::now())
    });
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut ask = |id: u64, method: &str, params: Value| -> Value {
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(stdin, "{line}").expect("write");
        stdin.flush().expect("flush");
        loop {
            let mut reply = String::new();
            assert!(stdout.read_line(&mut reply).expect("read") > 0, "hotsh closed stdout");
            let reply: Value = serde_json::from_str(&reply).expect("JSON");
            if reply["id"] == id {
                return reply;
            }
        }
    };
    ask(
        1,
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {"_meta": {"terminal_output": true}}}),
    );
    let initialize = started.elapsed();
    let initialized = Instant::now();
    let rss_after_initialize_kib = rss_kib(pid);
    let before_new = Instant::now();
    let session = ask(2, "session/new", json!({"cwd": cwd, "mcpServers": []}));
    let session_new = before_new.elapsed();
    let id = session["result"]["sessionId"].clone();
    ask(3, "session/prompt", json!({"sessionId": id, "prompt": [{"type": "text", "text": "hi"}]}));
    // (The prompt may be answered before the scan ends: no model is configured.)
    let plugins_ready = scanned
        .join()
        .ok()
        .flatten()
        .expect("the log says the initial plugin scan is done")
        .duration_since(initialized);
    let rss_plugins_loaded_kib = rss_kib(pid);
    drop(stdin);
    let _ = child.wait();
    Sample {
        initialize,
        session_new,
        plugins_ready,
        rss_after_initialize_kib,
        rss_plugins_loaded_kib,
    }
}

/// Memory at rest and after work, in the default mode (workspace-write, the sandbox the
/// machine has): the agent's RSS and PSS a second after `initialize` and `session/new`, the
/// PSS of its whole process tree then, and after a turn of 20 `true` commands (its
/// session's sandbox environment started by then).
fn memory(runs: usize) {
    let hotsh = release_dir().join("hotsh");
    let mut rows = Vec::new();
    for run in 1..=runs {
        let mut turn: Vec<Value> = (0..20)
            .map(|_| json!({"tool_calls": [{"name": "bash", "arguments": {"command": "true"}}]}))
            .collect();
        turn.push(json!({"text": "done"}));
        let mut agent = Agent::start(&hotsh, turn, "");
        let pid = agent.pid();
        std::thread::sleep(Duration::from_secs(1));
        let (rss, pss) = (rss_kib(pid), rollup_kib(pid, "Pss:"));
        let (at_rest, processes_at_rest) = tree_pss_kib(pid);
        let response = agent.prompt("run them");
        assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
        std::thread::sleep(Duration::from_secs(1));
        let (after, processes_after) = tree_pss_kib(pid);
        agent.finish();
        let mib = |kib: u64| kib as f64 / 1024.0;
        println!(
            "run {run}: agent RSS {:.1} MiB, PSS {:.1} MiB at rest; tree PSS {:.1} MiB at rest ({processes_at_rest} processes), {:.1} MiB after 20 commands ({processes_after} processes)",
            mib(rss),
            mib(pss),
            mib(at_rest),
            mib(after)
        );
        rows.push([mib(rss), mib(pss), mib(at_rest), mib(after)]);
    }
    let column = |at: usize| median(rows.iter().map(|row| row[at]).collect());
    println!("median of {runs} runs:");
    println!(
        "  the agent at rest (after initialize and session/new): RSS {:.1} MiB, PSS {:.1} MiB",
        column(0),
        column(1)
    );
    println!(
        "  the whole tree's PSS at rest: {:.1} MiB; after a 20-command turn: {:.1} MiB",
        column(2),
        column(3)
    );
}

/// A field of `/proc/PID/smaps_rollup`, in KiB (0 for a process that is gone).
fn rollup_kib(pid: u32, field: &str) -> u64 {
    proc_kib(pid, "smaps_rollup", field).unwrap_or(0)
}

/// The PSS of `pid` and all its descendants, in KiB, and how many processes that is.
fn tree_pss_kib(pid: u32) -> (u64, usize) {
    let mut pending = vec![pid];
    let (mut total, mut count) = (0, 0);
    while let Some(pid) = pending.pop() {
        total += rollup_kib(pid, "Pss:");
        count += 1;
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten();
        for task in tasks {
            let children =
                std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            pending
                .extend(children.split_whitespace().filter_map(|child| child.parse::<u32>().ok()));
        }
    }
    (total, count)
}

fn rss_kib(pid: u32) -> u64 {
    proc_status_kib(pid, "VmRSS:")
}

fn proc_status_kib(pid: u32, field: &str) -> u64 {
    proc_kib(pid, "status", field).unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// The `field` (in kB) of the file `/proc/PID/<file>`.
fn proc_kib(pid: u32, file: &str, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/{file}")).ok()?;
    text.lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
}

fn sessions(events: usize, runs: usize) {
    let hotsh = release_dir().join("hotsh");
    let mut throughput = Vec::new();
    let mut overhead = Vec::new();
    let mut load_ms = Vec::new();
    let mut load_rss = Vec::new();
    let mut first_ms = Vec::new();
    let mut streamed_ms = Vec::new();
    let mut settled_ms = Vec::new();
    let mut settled_cpu = Vec::new();
    for run in 1..=runs {
        // Append throughput: one answer of `events` chunks.
        let chunks: Vec<String> = (0..events).map(|i| format!("chunk {i} ")).collect();
        let mut agent = Agent::start(&hotsh, vec![json!({"text": chunks})], "");
        let started = Instant::now();
        let (response, seen) = agent.prompt_collecting("stream");
        let took = started.elapsed();
        assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
        let chunks_seen = seen
            .iter()
            .filter(|m| m["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
            .count();
        assert_eq!(chunks_seen, events, "every chunk reaches the client");
        let per_second = events as f64 / took.as_secs_f64();

        // Turn overhead: short turns, each logged and flushed.
        let turns: Vec<Value> = (0..20).map(|_| json!({"text": "ok"})).collect();
        let mut agent = Agent::start(&hotsh, turns, "");
        agent.prompt_collecting("warm up");
        let mut each = Vec::new();
        for _ in 0..19 {
            let started = Instant::now();
            agent.prompt_collecting("again");
            each.push(ms(started.elapsed()));
        }
        let turn = median(each);

        // Load: a log of `events` records written beside a fresh agent.
        let cold = load_session_of(&hotsh, events, Mix::Cards, Start::Cold);
        let (loaded, peak) = (cold.ms, cold.peak_kib);
        let first = load_session_of(&hotsh, events, Mix::Cards, Start::FirstEver).ms;
        let streamed = load_session_of(&hotsh, events, Mix::Streamed, Start::Cold).ms;
        let settled = load_session_of(&hotsh, events, Mix::Cards, Start::Settled).ms;
        let sampled = load_session_of(&hotsh, events, Mix::Cards, Start::Sampled);
        let cpu = sampled.cpu_ms.expect("a sampled load counts the CPU time");
        println!(
            "run {run}: {per_second:.0} events/s appended, turn {turn:.2} ms, load of {events} events {loaded:.1} ms (cards) / {first:.1} ms (cards, first start ever) / {streamed:.1} ms (streamed) / {settled:.1} ms (cards, agent settled; {cpu:.1} ms of the agent's CPU), peak RSS {:.1} MiB",
            peak as f64 / 1024.0
        );
        settled_cpu.push(cpu);
        streamed_ms.push(streamed);
        settled_ms.push(settled);
        throughput.push(per_second);
        overhead.push(turn);
        load_ms.push(loaded);
        first_ms.push(first);
        load_rss.push(peak as f64 / 1024.0);
    }
    println!("median of {runs} runs:");
    println!("  append: {:.0} events/s (each logged and sent to the client)", median(throughput));
    println!("  a turn with one short answer: {:.2} ms prompt to answer", median(overhead));
    println!(
        "  session/load of {events} events, a card every 10 records, right after start: {:.1} ms, peak RSS {:.1} MiB",
        median(load_ms),
        median(load_rss)
    );
    println!(
        "  the same at hotsh's first start ever with these plugins (each checked in a process first): {:.1} ms",
        median(first_ms)
    );
    println!(
        "  session/load of {events} events as a streaming model leaves them: {:.1} ms",
        median(streamed_ms)
    );
    println!(
        "  session/load of {events} events with cards in an agent started {} ms before (its plugins loaded): {:.1} ms, {:.1} ms of the agent's CPU (all its threads)",
        SETTLE.as_millis(),
        median(settled_ms),
        median(settled_cpu)
    );
}

/// `session/load` of `events` records with cards alone, `runs` times right after start and
/// in a settled agent, alternately: the `sessions` figures of item 4 with more runs in less
/// time, for comparing builds on a noisy machine.
fn load(events: usize, runs: usize) {
    let hotsh = release_dir().join("hotsh");
    let (mut cold, mut settled) = (Vec::new(), Vec::new());
    for run in 1..=runs {
        let right_after = load_session_of(&hotsh, events, Mix::Cards, Start::Cold).ms;
        let later = load_session_of(&hotsh, events, Mix::Cards, Start::Settled).ms;
        println!(
            "run {run}: load of {events} events {right_after:.1} ms right after start, {later:.1} ms settled"
        );
        cold.push(right_after);
        settled.push(later);
    }
    println!(
        "median of {runs} runs: session/load of {events} events with cards {:.1} ms right after start, {:.1} ms settled",
        median(cold),
        median(settled)
    );
}

/// When a timed `session/load` comes.
#[derive(Clone, Copy, Debug)]
enum Start {
    /// Right after `initialize`, as Zed loads a thread in a new agent: the initial plugin
    /// scan runs meanwhile, and the cards wait for it. The data directory has the record of
    /// the plugin builds this hotsh checked (as after any earlier start: see
    /// [`checked_builds`]), so they load without a check each.
    Cold,
    /// As [`Start::Cold`] in a data directory no hotsh ran in: every plugin is checked in a
    /// throwaway process first, as at a user's very first start.
    FirstEver,
    /// [`SETTLE`] after `initialize`, as in an agent that has been running.
    Settled,
    /// As [`Start::Settled`], with the CPU time of the agent's threads counted by sampling
    /// them while it loads (see [`Sampler`]), which costs the machine some of its time.
    Sampled,
}

/// How long a settled agent runs before the timed load.
const SETTLE: Duration = Duration::from_millis(500);

/// Writes a session log of `events` records (prompts, text, terminal cards with output) and
/// times `session/load` of it; returns (ms, peak RSS in KiB).
/// What a benchmark session log is made of.
#[derive(Clone, Copy, Debug)]
enum Mix {
    /// A card every 10 records: prompt, text, a command with 4 output chunks, its result,
    /// more text. Each card is several updates on load.
    Cards,
    /// What a streaming model leaves: per turn a prompt, 40 reasoning chunks, 40 text
    /// chunks, a command with 8 output chunks; chunks of one stream are joined on load.
    Streamed,
}

/// Writes a session log of `events` records of `mix` and times `session/load` of it.
fn load_session_of(hotsh: &std::path::Path, events: usize, mix: Mix, start: Start) -> Load {
    let agent = Agent::start(hotsh, vec![], "");
    let dir = agent._dir.path().to_owned();
    let id = "6f0e2b4c-0b7d-4c61-9a35-3c2ea7f0b001";
    let mut log = LogText::default();
    log.push(
        "session",
        json!({"session_id": id, "cwd": dir, "created_at": "2026-11-30T20:00:00.000Z", "agent": "bench"}),
    );
    let mut call = 0;
    while log.seq < events {
        log.push("prompt", json!({"text": "do it", "blocks": [{"type": "text", "text": "do it"}]}));
        let (thoughts, texts, outputs) = match mix {
            Mix::Cards => (0, 1, 4),
            Mix::Streamed => (40, 40, 8),
        };
        for i in 0..thoughts {
            log.push("agent_thought", json!({"text": format!("thinking {i} ")}));
        }
        for i in 0..texts {
            log.push("agent_text", json!({"text": format!("word {i} ")}));
        }
        call += 1;
        let call_id = format!("call-{call}");
        let card = json!({"terminal": {"command": "seq 1 10", "description": null, "cwd": dir, "exit": null}});
        log.push(
            "tool_call_started",
            json!({"call_id": call_id, "tool": "bash", "card": card, "raw_input": {"command": "seq 1 10"}, "arguments": "{\"command\":\"seq 1 10\"}"}),
        );
        for _ in 0..outputs {
            log.push("tool_output", json!({"call_id": call_id, "text": "1\n2\n3\n4\n5\n"}));
        }
        let done = json!({"terminal": {"command": "seq 1 10", "description": null, "cwd": dir, "exit": {"exit_code": 0, "signal": null}}});
        log.push(
            "tool_call_finished",
            json!({"call_id": call_id, "card": done, "status": "completed", "raw_output": {"exit_code": 0}, "error": null, "output_text": "1\n2"}),
        );
        log.push("tool_result", json!({"call_id": call_id, "text": "1\n2", "is_error": false}));
        log.push("agent_text", json!({"text": "Done."}));
    }
    drop(agent);
    let load = time_load(hotsh, id, &dir, &log.text, start);
    // Chunks of one stream are joined on load: a streamed log makes far fewer updates.
    let least = match mix {
        Mix::Cards => events / 2,
        Mix::Streamed => events / 40,
    };
    assert!(load.updates >= least, "only {} updates", load.updates);
    load
}

/// The record of plugin builds a hotsh checked, in its data directory.
const CHECKED_BUILDS: &str = "plugins-checked.json";

/// The record of plugin builds `hotsh` (this very file) leaves in its data directory once
/// its initial plugin scan is done: taken from one agent started for it, once per run.
/// `None` from a hotsh that keeps none (an older build, compared through `HOTSH_BENCH_DIR`).
fn checked_builds(hotsh: &std::path::Path) -> Option<Vec<u8>> {
    static RECORD: std::sync::OnceLock<Option<Vec<u8>>> = std::sync::OnceLock::new();
    RECORD
        .get_or_init(|| {
            let agent = Agent::start(hotsh, vec![], "");
            let path = agent._dir.path().join("data").join(CHECKED_BUILDS);
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if let Ok(record) = std::fs::read(&path) {
                    return Some(record);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            eprintln!("this hotsh keeps no record of the plugin builds it checked");
            None
        })
        .clone()
}

/// A timed `session/load`.
struct Load {
    /// From the request to the last byte of the answer.
    ms: f64,
    /// The updates before the answer.
    updates: usize,
    /// The host's peak RSS after it.
    peak_kib: u64,
    /// With [`Start::Sampled`], the CPU time the host's threads spent meanwhile.
    cpu_ms: Option<f64>,
}

/// `session/load` of a session whose log is `log` (its cwd `cwd`) in a new `hotsh`, timed
/// from the request to the last byte of the answer.
fn time_load(
    hotsh: &std::path::Path,
    id: &str,
    cwd: &std::path::Path,
    log: &str,
    start: Start,
) -> Load {
    let data = tempfile::tempdir().expect("data dir");
    let sessions = data.path().join("sessions");
    std::fs::create_dir_all(&sessions).expect("sessions dir");
    std::fs::write(sessions.join(format!("{id}.jsonl")), log).expect("the log");
    if let (Some(record), false) = (checked_builds(hotsh), matches!(start, Start::FirstEver)) {
        std::fs::write(data.path().join(CHECKED_BUILDS), record).expect("the checked builds");
    }
    let mut command = Command::new(hotsh);
    let mut child = command
        .arg("acp")
        .env("HOTSH_LOG", "warn")
        .env("HOTSH_DATA_DIR", data.path())
        .env("TMPDIR", data.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("hotsh starts");
    let pid = child.id();
    let stdin = child.stdin.take().expect("stdin");
    let stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut client = Agent { child, stdin, stdout, next_id: 1, _dir: data, session: Value::Null };
    client.ask(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {"_meta": {"terminal_output": true}}}),
    );
    if let Start::Settled | Start::Sampled = start {
        std::thread::sleep(SETTLE);
    }
    // Timed to the last byte of the answer; the updates are counted, not parsed (a client's
    // own parsing is not the agent's latency).
    let line = json!({"jsonrpc": "2.0", "id": 99, "method": "session/load",
        "params": {"sessionId": id, "cwd": cwd, "mcpServers": []}});
    let sampler = matches!(start, Start::Sampled).then(|| Sampler::start(pid));
    let started = Instant::now();
    writeln!(client.stdin, "{line}").expect("write");
    client.stdin.flush().expect("flush");
    let mut updates = 0;
    let answer = loop {
        let mut raw = String::new();
        assert!(client.stdout.read_line(&mut raw).expect("read") > 0, "hotsh closed stdout");
        if !raw.contains("\"method\"") {
            break raw;
        }
        updates += 1;
    };
    let took = ms(started.elapsed());
    let cpu = sampler.map(Sampler::cpu_ms);
    let answer: Value = serde_json::from_str(&answer).expect("JSON");
    assert_eq!(answer["id"], 99, "{answer}");
    assert!(answer.get("result").is_some(), "{answer}");
    let peak = proc_status_kib(pid, "VmHWM:");
    client.finish();
    Load { ms: took, updates, peak_kib: peak, cpu_ms: cpu }
}

/// The CPU time each thread of process `pid` has run so far, in ns, by thread id
/// (`/proc/PID/task/*/schedstat`).
fn thread_times(pid: u32) -> HashMap<String, u64> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("the agent's threads");
    tasks
        .flatten()
        .filter_map(|task| {
            let stat = std::fs::read_to_string(task.path().join("schedstat")).ok()?;
            let ran = stat.split_whitespace().next()?.parse::<u64>().ok()?;
            Some((task.file_name().to_string_lossy().into_owned(), ran))
        })
        .collect()
}

/// Samples the CPU time of a process's threads every half millisecond until asked for the
/// total: a thread that ends meanwhile counts with what it had run at its last sample.
struct Sampler {
    before: HashMap<String, u64>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    sampling: std::thread::JoinHandle<HashMap<String, u64>>,
}

impl Sampler {
    fn start(pid: u32) -> Self {
        let before = thread_times(pid);
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let sampling = std::thread::spawn(move || {
            let mut latest = HashMap::new();
            loop {
                let last = stopped.load(std::sync::atomic::Ordering::Relaxed);
                latest.extend(thread_times(pid));
                if last {
                    return latest;
                }
                std::thread::sleep(Duration::from_micros(500));
            }
        });
        Self { before, stop, sampling }
    }

    /// The CPU time the threads ran since the start, in ms.
    fn cpu_ms(self) -> f64 {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let latest = self.sampling.join().expect("the sampler");
        let ran: u64 =
            latest.iter().map(|(tid, ran)| ran - self.before.get(tid).copied().unwrap_or(0)).sum();
        ran as f64 / 1e6
    }
}

/// A session log being written by the benchmark, in the documented format.
#[derive(Default)]
struct LogText {
    text: String,
    seq: usize,
}

impl LogText {
    fn push(&mut self, kind: &str, data: Value) {
        self.seq += 1;
        // The documented key order, `type` before `data`, as hotsh writes it.
        self.text.push_str(&format!(
            "{{\"v\":1,\"seq\":{},\"at\":\"2026-11-30T20:00:00.000Z\",\"type\":{},\"data\":{data}}}",
            self.seq,
            Value::from(kind)
        ));
        self.text.push('\n');
    }
}

fn models(turns: usize, chunks: usize) {
    use hotsh_tests::{FakeProvider, Reply, delta};
    let hotsh = release_dir().join("hotsh");
    let one_chunk = || {
        Reply::Stream(vec![
            delta(json!({"content": "ok"}), Some("stop")),
            "data: [DONE]\n\n".into(),
        ])
    };
    // Turn overhead: the same short turn through the loopback server and the script.
    let provider = FakeProvider::start((0..=turns).map(|_| one_chunk()).collect());
    let mut loopback = Agent::start_with_model(
        &hotsh,
        &["--model", "openai:bench", "--base-url", &provider.base_url],
    );
    let scripted_responses: Vec<Value> = (0..=turns).map(|_| json!({"text": "ok"})).collect();
    let mut scripted = Agent::start(&hotsh, scripted_responses, "");
    let time_turns = |agent: &mut Agent| {
        agent.prompt_collecting("warm up");
        let mut each = Vec::new();
        for _ in 0..turns {
            let started = Instant::now();
            let (response, _) = agent.prompt_collecting("again");
            assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
            each.push(ms(started.elapsed()));
        }
        median(each)
    };
    let over_loopback = time_turns(&mut loopback);
    let over_script = time_turns(&mut scripted);

    // Chunk delay: the server writes a chunk, the client waits for its update.
    let (pieces, paced) = std::sync::mpsc::channel::<String>();
    let paced = std::sync::Arc::new(std::sync::Mutex::new(paced));
    // The first answer streams the chunks; each of the next `turns` is one chunk, timed from
    // the end of its stream to the context-use update the client reads.
    let provider = FakeProvider::start(
        (0..=turns).map(|_| Reply::Paced(std::sync::Arc::clone(&paced))).collect(),
    );
    let mut agent = Agent::start_with_model(
        &hotsh,
        &["--model", "openai:bench", "--base-url", &provider.base_url],
    );
    let session = agent.session.clone();
    let line = json!({"jsonrpc": "2.0", "id": 9999, "method": "session/prompt",
        "params": {"sessionId": session, "prompt": [{"type": "text", "text": "stream"}]}});
    writeln!(agent.stdin, "{line}").expect("write");
    agent.stdin.flush().expect("flush");
    let mut delays = Vec::new();
    for i in 0..chunks {
        let text = format!("chunk-{i} ");
        let sent = Instant::now();
        pieces.send(delta(json!({"content": text}), None)).expect("the server takes it");
        agent.wait_notification(|m| m["params"]["update"]["content"]["text"] == text.as_str());
        delays.push(ms(sent.elapsed()));
    }
    pieces.send(delta(json!({}), Some("stop"))).expect("stop");
    pieces.send("data: [DONE]\n\n".into()).expect("done");
    pieces.send(String::new()).expect("the end of the answer");
    agent.wait_response(9999);
    let mut usage_delays = Vec::new();
    for turn in 0..turns {
        let id = 10_000 + turn as u64;
        let line = json!({"jsonrpc": "2.0", "id": id, "method": "session/prompt",
            "params": {"sessionId": session, "prompt": [{"type": "text", "text": "again"}]}});
        writeln!(agent.stdin, "{line}").expect("write");
        agent.stdin.flush().expect("flush");
        // The request has reached the server: its answer is all that is left of the turn.
        while provider.received().len() < turn + 2 {
            std::thread::yield_now();
        }
        pieces.send(delta(json!({"content": "ok"}), Some("stop"))).expect("a chunk");
        let ended = Instant::now();
        pieces.send("data: [DONE]\n\n".into()).expect("done");
        pieces.send(String::new()).expect("the end of the answer");
        agent.wait_notification(|m| m["params"]["update"]["sessionUpdate"] == "usage_update");
        usage_delays.push(ms(ended.elapsed()));
        agent.wait_response(id);
    }
    drop(pieces);
    let mut sorted = delays.clone();
    sorted.sort_by(f64::total_cmp);
    let p99 = sorted[(sorted.len() * 99 / 100).min(sorted.len() - 1)];
    println!("turn with a one-chunk answer, prompt to answer (median of {turns}):");
    println!("  through the loopback server: {over_loopback:.2} ms");
    println!("  through the scripted model:  {over_script:.2} ms");
    println!("  the adapter's share:         {:.2} ms", over_loopback - over_script);
    println!(
        "chunk written by the server -> its session/update read by the client ({chunks} chunks):"
    );
    println!("  median {:.3} ms, p99 {p99:.3} ms", median(delays));
    println!(
        "answer's stream ended -> its usage_update read by the client (median of {turns}): {:.3} ms",
        median(usage_delays)
    );
}

fn long(turns: usize, whole: bool) {
    use hotsh_tests::{FakeProvider, Reply, delta};
    let call = || {
        let arguments = json!({"command": "head -c 4096 /dev/zero | tr '\\0' a"}).to_string();
        Reply::Stream(vec![
            delta(
                json!({"tool_calls": [{"index": 0, "id": "c", "type": "function",
                    "function": {"name": "bash", "arguments": arguments}}]}),
                Some("tool_calls"),
            ),
            "data: [DONE]\n\n".into(),
        ])
    };
    let text = |t: &str| {
        Reply::Stream(vec![delta(json!({"content": t}), Some("stop")), "data: [DONE]\n\n".into()])
    };
    let mut replies: Vec<Reply> = (0..turns).flat_map(|_| [call(), text("ok")]).collect();
    replies.push(text("SUMMARY: printed 4 KiB a turn."));
    let provider = FakeProvider::start_unparsed(replies);
    let session_settings = if whole { "[session]\nprune_tool_output = false\n" } else { "" };
    let (mut agent, data) = unconfined_with(&provider, session_settings);
    let session = agent.session.as_str().unwrap_or_default().to_owned();
    let log = data.join("sessions").join(format!("{session}.jsonl"));
    let mut times = Vec::new();
    let mut bounds = Vec::new();
    let mut rss = Vec::new();
    for turn in 1..=turns {
        let started = Instant::now();
        let response = agent.prompt(&format!("turn {turn}"));
        let ended = Instant::now();
        assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
        times.push(ms(ended - started));
        bounds.push((started, ended));
        rss.push(rss_kib(agent.pid()));
    }
    let around = |values: &[f64], at: usize| {
        median(values[at.saturating_sub(5)..(at + 5).min(values.len())].to_vec())
    };
    let early = around(&times, 10.min(turns / 2));
    let late = around(&times, turns - 5);
    // The host's own work for a tool call: from the model's tool call written to the next
    // request's connection (the command runs in between; the request's bytes on the wire are
    // not in it).
    let timeline = provider.timeline();
    let gaps: Vec<f64> =
        (0..turns).map(|t| ms(timeline[2 * t + 1].0 - timeline[2 * t].1)).collect();
    let (gap_early, gap_late) = (around(&gaps, 10.min(turns / 2)), around(&gaps, turns - 5));
    // The rest of the host's part of a turn: from the prompt sent to the first request's
    // connection, and from the last answer written to the turn's end read by the client.
    let (opened, closed): (Vec<f64>, Vec<f64>) = bounds
        .iter()
        .enumerate()
        .map(|(t, (started, ended))| {
            (ms(timeline[2 * t].0 - *started), ms(*ended - timeline[2 * t + 1].1))
        })
        .unzip();
    // The loopback model's part of each request: from its connection to its reply written
    // (it reads the whole request first: the conversation, which grows with the session).
    let served: Vec<f64> = timeline.iter().map(|(came, done)| ms(*done - *came)).collect();
    let (served_early, served_late) =
        (around(&served, 2 * 10.min(turns / 2)), around(&served, 2 * turns - 10));
    let log_bytes = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
    let last_request =
        provider.received().last().and_then(|r| r.header("content-length")?.parse().ok());
    println!(
        "a session of {turns} turns (a 4 KiB command each; {}), its last request {:.1} KB:",
        if whole { "every output whole" } else { "older output cleared, as by default" },
        last_request.unwrap_or(0) as f64 / 1e3
    );
    println!(
        "  turn time near turn 10: {early:.2} ms; near turn {turns}: {late:.2} ms ({:.2}x)",
        late / early
    );
    println!(
        "  tool call written -> next request (the command and the host's work): {gap_early:.2} ms near turn 10; {gap_late:.2} ms near turn {turns} ({:.2}x)",
        gap_late / gap_early
    );
    println!(
        "  prompt -> first request: {:.2} ms near turn 10; {:.2} ms near turn {turns}; last answer written -> end of turn: {:.2} ms; {:.2} ms",
        around(&opened, 10.min(turns / 2)),
        around(&opened, turns - 5),
        around(&closed, 10.min(turns / 2)),
        around(&closed, turns - 5),
    );
    println!(
        "  a request at the loopback model, its connection to its reply written (the conversation read whole): {served_early:.2} ms near turn 10; {served_late:.2} ms near turn {turns}"
    );
    if let Some(bytes) = last_request {
        let bare = loopback_transfer(bytes);
        // What the transfer alone costs: the turn time any host would have near the end, with
        // no growth of its own, the bytes moved as fast as this machine's loopback moves them.
        let growth = |floor: f64| (early + 2.0 * (floor - served_early).max(0.0)) / early;
        println!(
            "  the same {:.1} MB over a bare loopback socket pair, in writes of {} KiB: {:.2} ms written again at once, {:.2} ms after 64 MiB written elsewhere (a turn near turn {turns} with nothing but that growth: {:.2}x; {:.2}x)",
            bytes as f64 / 1e6,
            bare.write >> 10,
            bare.hot,
            bare.cooled,
            growth(bare.hot),
            growth(bare.cooled),
        );
    }
    println!(
        "  host RSS at turn 10: {:.1} MiB; at turn {turns}: {:.1} MiB ({:.2} MiB per 100 turns)",
        rss[9.min(turns - 1)] as f64 / 1024.0,
        rss[turns - 1] as f64 / 1024.0,
        (rss[turns - 1] as f64 - rss[9.min(turns - 1)] as f64) / 1024.0 / (turns as f64 / 100.0)
    );
    println!("  session log: {:.1} KiB per turn", log_bytes as f64 / 1024.0 / turns as f64);
    let cwd = agent._dir.path().to_owned();
    let loaded = |agent_log: &std::path::Path| {
        let text = std::fs::read_to_string(agent_log).expect("the session log");
        let records = text.lines().count();
        let load = time_load(&release_dir().join("hotsh"), &session, &cwd, &text, Start::Cold);
        (records, load.ms, load.peak_kib)
    };
    let (records, took, peak) = loaded(&log);
    println!(
        "  session/load of it ({records} records) in a new hotsh: {took:.1} ms, peak RSS {:.1} MiB",
        peak as f64 / 1024.0
    );
    let started = Instant::now();
    let response = agent.prompt("/compact");
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    let compacted = ms(started.elapsed());
    let timeline = provider.timeline();
    let summary = timeline.last().map_or(0.0, |(came, done)| ms(*done - *came));
    println!(
        "  /compact of the whole session, prompt to answer: {compacted:.2} ms (the loopback model's part, request to reply: {summary:.2} ms)"
    );
    let (records, took, peak) = loaded(&log);
    println!(
        "  session/load of the compacted session ({records} records): {took:.1} ms, peak RSS {:.1} MiB",
        peak as f64 / 1024.0
    );
    agent.finish();
}

/// The floor under what moving a request of `bytes` to the loopback model costs: the medians
/// (of 21) of the time to move that many bytes from one thread to another over a loopback TCP
/// connection, read into a buffer made once.
#[derive(Debug, Clone, Copy)]
struct Transfer {
    /// Written again at once (the bytes in the core's caches), in the fastest size of write
    /// (64, 128 or 256 KiB: over Linux's loopback, writes larger than a fresh connection's
    /// receive window, 128 KiB, move more slowly).
    hot: f64,
    /// The same writes after 64 MiB of other memory was written (the core's own caches then
    /// hold none of the bytes), as a conversation is by the time its next request goes (a
    /// command ran in between).
    cooled: f64,
    /// The size of those writes.
    write: usize,
}

fn loopback_transfer(bytes: usize) -> Transfer {
    use std::io::{Read as _, Write as _};
    const ROUNDS: usize = 21;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let address = listener.local_addr().expect("address");
    // The reader answers each connection once it has all of it, and says when.
    let (ends_to, ends) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buffer = vec![0u8; bytes];
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            stream.read_exact(&mut buffer).expect("the bytes");
            let _ = ends_to.send(Instant::now());
            stream.write_all(b".").expect("the answer");
        }
    });
    let data = vec![b'a'; bytes];
    let mut other = vec![0u8; 64 << 20];
    let mut round = |write: usize, cool: bool| {
        let mut stream = std::net::TcpStream::connect(address).expect("connect");
        stream.set_nodelay(true).expect("nodelay");
        if cool {
            // More than the core's own caches hold, a byte of each line written over.
            other.iter_mut().step_by(64).for_each(|byte| *byte = byte.wrapping_add(1));
            std::hint::black_box(&mut other);
        }
        let start = Instant::now();
        for piece in data.chunks(write) {
            stream.write_all(piece).expect("write");
        }
        stream.read_exact(&mut [0u8]).expect("the answer");
        ms(ends.recv().expect("the reader") - start)
    };
    let (hot, write) = [64 << 10, 128 << 10, 256 << 10]
        .into_iter()
        .map(|write| (median((0..ROUNDS).map(|_| round(write, false)).collect()), write))
        .min_by(|a, b| a.0.total_cmp(&b.0))
        .expect("sizes");
    let cooled = median((0..ROUNDS).map(|_| round(write, true)).collect());
    Transfer { hot, cooled, write }
}

fn long_line(mib: usize, runs: usize) {
    use hotsh_tests::{FakeProvider, Reply, delta};
    let hotsh = release_dir().join("hotsh");
    let mut each = Vec::new();
    for run in 1..=runs {
        let line = delta(json!({"content": "x".repeat(mib << 20)}), Some("stop"));
        let provider = FakeProvider::start_unparsed(vec![Reply::Stream(vec![
            line,
            "data: [DONE]\n\n".into(),
        ])]);
        let dir = tempfile::tempdir().expect("temp dir");
        let session = format!("[session]\nmax_answer_tokens = {}\n", (mib << 20) / 2);
        let config = bench_profile(dir.path(), &provider.base_url, &session, "");
        let mut agent = Agent::launch(dir, &hotsh, vec!["--config".into(), config.into()]);
        let started = Instant::now();
        let response = agent.prompt("one long line");
        assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
        let took = ms(started.elapsed());
        println!("run {run}: {took:.0} ms");
        each.push(took);
        agent.finish();
    }
    println!("one {mib} MiB line, prompt to answer: median {:.0} ms", median(each));
}

/// Writes `dir/config.toml` choosing the profile `bench` at `base_url` (with `profile` lines),
/// after the `sections` given; returns its path.
/// hotsh's own work per tool call in the default mode (issue "speed", item 1): a loopback
/// model answers each turn with one `true` call; from that answer's last byte to the next
/// request's first byte, minus a `bash -c true` started directly (outside any sandbox: the
/// sandbox's own cost counts as hotsh's). Medians over `turns` turns, per backend.
fn toolcall(turns: usize) {
    use hotsh_tests::{FakeProvider, Reply, delta};
    let call = || {
        Reply::Stream(vec![
            delta(
                json!({"tool_calls": [{"index": 0, "id": "c", "type": "function",
                    "function": {"name": "bash", "arguments": "{\"command\":\"true\"}"}}]}),
                Some("tool_calls"),
            ),
            "data: [DONE]\n\n".into(),
        ])
    };
    let text = || {
        Reply::Stream(vec![
            delta(json!({"content": "ok"}), Some("stop")),
            "data: [DONE]\n\n".into(),
        ])
    };
    let mut backends = vec!["landlock"];
    if Command::new("bwrap").arg("--version").output().is_ok_and(|o| o.status.success()) {
        backends.push("bwrap");
    }
    let direct: Vec<f64> = (0..turns)
        .map(|_| {
            let started = Instant::now();
            let status = Command::new("bash").args(["-c", "true"]).status().expect("bash runs");
            assert!(status.success());
            ms(started.elapsed())
        })
        .collect();
    let direct = median(direct);
    for backend in backends {
        // One warm-up turn (the plugin scan, the session's sandbox set up), then `turns`.
        let replies: Vec<Reply> = (0..=turns).flat_map(|_| [call(), text()]).collect();
        let provider = FakeProvider::start_unparsed(replies);
        let dir = tempfile::tempdir().expect("temp dir");
        let sections = format!("[sandbox]\nbackend = \"{backend}\"\n");
        let config = bench_profile(dir.path(), &provider.base_url, &sections, "");
        let hotsh = release_dir().join("hotsh");
        let mut agent = Agent::launch(dir, &hotsh, vec!["--config".into(), config.into()]);
        for turn in 0..=turns {
            let response = agent.prompt(&format!("turn {turn}"));
            assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
        }
        agent.finish();
        let timeline = provider.timeline();
        let gaps: Vec<f64> =
            (1..=turns).map(|t| ms(timeline[2 * t + 1].0 - timeline[2 * t].1)).collect();
        let gap = median(gaps);
        println!(
            "{backend} (workspace-write): tool call's last byte -> next request {gap:.2} ms; `bash -c true` directly {direct:.2} ms; hotsh's own work per tool call {:.2} ms (median of {turns})",
            gap - direct
        );
    }
}

/// The release agent on `provider`'s loopback model, unconfined (the sandbox's cost would hide
/// the host's), its window too large to compact; and its data directory.
fn unconfined_on(provider: &hotsh_tests::FakeProvider) -> (Agent, PathBuf) {
    unconfined_with(provider, "")
}

/// [`unconfined_on`], with more sections of the config file.
fn unconfined_with(provider: &hotsh_tests::FakeProvider, sections: &str) -> (Agent, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = bench_profile(
        dir.path(),
        &provider.base_url,
        &format!("[sandbox]\nbackend = \"none\"\n{sections}"),
        "context_window = 1000000000\n",
    );
    let data = dir.path().join("data");
    let hotsh = release_dir().join("hotsh");
    (Agent::launch(dir, &hotsh, vec!["--config".into(), config.into()]), data)
}

fn bench_profile(dir: &std::path::Path, base_url: &str, sections: &str, profile: &str) -> PathBuf {
    let config = dir.join("config.toml");
    let text = format!(
        "model = \"bench\"\n{sections}[models.bench]\nbase_url = \"{base_url}\"\nmodel = \"bench\"\n{profile}"
    );
    std::fs::write(&config, text).expect("config");
    config
}

fn subagents(turns: usize) {
    use hotsh_tests::{FakeProvider, Reply};
    let task = json!({"description": "Bench", "prompt": "Answer ok."});
    let plan = json!({"plan": [{"step": "bench", "status": "completed"}]});
    let replies: Vec<Reply> = (0..turns)
        .flat_map(|_| {
            [
                Reply::calls(&[("task", task.clone())]),
                Reply::text("ok"),
                Reply::text("done"),
                Reply::calls(&[("update_plan", plan.clone())]),
                Reply::text("done"),
            ]
        })
        .collect();
    let provider = FakeProvider::start_unparsed(replies);
    let (mut agent, _) = unconfined_on(&provider);
    let mut rss = Vec::new();
    for turn in 1..=turns {
        for prompt in ["delegate", "plan"] {
            let response = agent.prompt(&format!("{prompt} {turn}"));
            assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
        }
        rss.push(rss_kib(agent.pid()));
    }
    let timeline = provider.timeline();
    let gap = |from: usize| ms(timeline[from + 1].0 - timeline[from].1);
    let child: Vec<f64> = (0..turns).map(|t| gap(5 * t)).collect();
    let baseline: Vec<f64> = (0..turns).map(|t| gap(5 * t + 3)).collect();
    for (turn, (c, b)) in child.iter().zip(&baseline).enumerate() {
        println!(
            "turn {}: task call -> child's request {c:.3} ms; update_plan call -> next request {b:.3} ms",
            turn + 1
        );
    }
    let (child, baseline) = (median(child), median(baseline));
    let warm = turns.min(5);
    let grown = rss[turns - 1].saturating_sub(rss[warm - 1]);
    let per_child = grown as f64 / (turns - warm).max(1) as f64;
    println!("{turns} subagents (medians):");
    println!("  task call -> the child's first request: {child:.3} ms");
    println!("  update_plan call -> the next request: {baseline:.3} ms");
    println!("  opening a child costs {:.3} ms of hotsh's own work", child - baseline);
    println!(
        "  host RSS after {warm} turns {} KiB, after {turns} {} KiB: {per_child:.1} KiB kept per subagent",
        rss[warm - 1],
        rss[turns - 1]
    );
    agent.finish();
}
