//! Benchmarks of the real `hotsh` release binary. Run from the workspace root:
//!
//! ```text
//! cargo run --release -p hotsh-tests --bin hotsh-bench -- startup [RUNS]
//! ```
//!
//! `startup`: per run, spawn `hotsh` (no arguments: plugins from its own directory) and time
//! spawn → `initialize` answered, then `session/new`; read the RSS right after `initialize`,
//! and again once the plugins are loaded (after a first prompt, which waits for them). Prints
//! every run and the medians. The machine is shared and noisy: compare medians, not runs.

#![allow(
    clippy::disallowed_methods,
    reason = "the benchmark builds and starts hotsh"
)]
#![allow(clippy::print_stdout, reason = "the benchmark reports on stdout")]

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("startup") => {
            let runs = args
                .get(1)
                .map_or(10, |n| n.parse().expect("RUNS is a number"));
            startup(runs);
        }
        _ => {
            eprintln!("usage: hotsh-bench startup [RUNS]");
            std::process::exit(2);
        }
    }
}

/// Builds the release binary and plugin; returns the directory holding them.
fn release_dir() -> PathBuf {
    let workspace = hotsh_tests::workspace();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let status = Command::new(cargo)
        .args([
            "build",
            "--release",
            "-p",
            "hotsh-host",
            "-p",
            "hotsh-tool-bash",
        ])
        .current_dir(&workspace)
        .status()
        .expect("cargo runs");
    assert!(status.success(), "release build failed");
    std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace.join("target"), PathBuf::from)
        .join("release")
}

struct Sample {
    initialize: Duration,
    session_new: Duration,
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
            "run {run:>2}: initialize {:>6.2} ms  session/new {:>6.2} ms  RSS after initialize {:>6.1} MiB  with plugins loaded {:>6.1} MiB",
            ms(sample.initialize),
            ms(sample.session_new),
            sample.rss_after_initialize_kib as f64 / 1024.0,
            sample.rss_plugins_loaded_kib as f64 / 1024.0,
        );
        samples.push(sample);
    }
    let median = |f: &dyn Fn(&Sample) -> f64| {
        let mut values: Vec<f64> = samples.iter().map(f).collect();
        values.sort_by(f64::total_cmp);
        values[values.len() / 2]
    };
    println!("median of {runs} runs ({}):", hotsh.display());
    println!(
        "  spawn -> initialize answered: {:.2} ms",
        median(&|s| ms(s.initialize))
    );
    println!(
        "  session/new:                  {:.2} ms",
        median(&|s| ms(s.session_new))
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
        .env("HOTSH_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("hotsh starts");
    let pid = child.id();
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut ask = |id: u64, method: &str, params: Value| -> Value {
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(stdin, "{line}").expect("write");
        stdin.flush().expect("flush");
        loop {
            let mut reply = String::new();
            assert!(
                stdout.read_line(&mut reply).expect("read") > 0,
                "hotsh closed stdout"
            );
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
    let rss_after_initialize_kib = rss_kib(pid);
    let before_new = Instant::now();
    let session = ask(2, "session/new", json!({"cwd": cwd, "mcpServers": []}));
    let session_new = before_new.elapsed();
    let id = session["result"]["sessionId"].clone();
    // No model is configured: the prompt ends at once, after the plugin scan it waits for.
    ask(
        3,
        "session/prompt",
        json!({"sessionId": id, "prompt": [{"type": "text", "text": "hi"}]}),
    );
    let rss_plugins_loaded_kib = rss_kib(pid);
    drop(stdin);
    let _ = child.wait();
    Sample {
        initialize,
        session_new,
        rss_after_initialize_kib,
        rss_plugins_loaded_kib,
    }
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}
