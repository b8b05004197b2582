//! `hotsh dev [CRATE_DIR] [-- CARGO_BUILD_ARGS…]`: rebuilds a plugin crate whenever its
//! sources change, so that a running agent that watches the build's output directory serves
//! the new code without the author running cargo by hand.
//!
//! It builds once at start, then after every real change (a write, create, rename or removal)
//! of a `.rs` file or `Cargo.toml` under the crate, outside `target/`, once the sources have
//! been quiet for 200 ms. Reads (cargo opening the sources, an editor looking at them) and
//! metadata changes do not count. Builds never overlap: changes made during a build cause one
//! more build after it.
//!
//! After a successful build, each library the build produced is checked the way a running
//! agent checks a new build (in a throwaway process), and one line says whether it was
//! accepted (plugin, version, tools) or why it was rejected. Status lines go to stdout;
//! cargo's own messages (compile errors included, each printed once) go to stderr.

use crate::plugins::{CheckFailure, check_in_child};
use crate::term::out;
use anyhow::Context as _;
use notify::event::ModifyKind;
use notify::{EventKind, RecursiveMode, Watcher as _};
use std::io::BufRead as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::mpsc;
use std::time::Duration;

const QUIET: Duration = Duration::from_millis(200);

pub(crate) fn run(crate_dir: &Path, cargo_args: &[String]) -> anyhow::Result<ExitCode> {
    let crate_dir = std::path::absolute(crate_dir).context("cannot resolve the crate directory")?;
    anyhow::ensure!(
        crate_dir.join("Cargo.toml").is_file(),
        "{} has no Cargo.toml; pass the plugin crate's directory",
        crate_dir.display()
    );
    let (changed, changes) = mpsc::channel::<()>();
    let target = crate_dir.join("target");
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        let Ok(event) = event else { return };
        if is_change(&event.kind) && event.paths.iter().any(|p| is_source(p, &target)) {
            let _ = changed.send(());
        }
    })?;
    watcher
        .watch(&crate_dir, RecursiveMode::Recursive)
        .with_context(|| format!("cannot watch {}", crate_dir.display()))?;
    out(&format!("hotsh dev: watching {} (Ctrl-C to stop)", crate_dir.display()));
    loop {
        build(&crate_dir, cargo_args);
        // Wait for a change, then for the sources to be quiet.
        if changes.recv().is_err() {
            return Ok(ExitCode::SUCCESS);
        }
        while changes.recv_timeout(QUIET).is_ok() {}
    }
}

/// Whether an event is a change of content or of names (not a read, not metadata).
fn is_change(kind: &EventKind) -> bool {
    match kind {
        EventKind::Create(_) | EventKind::Remove(_) => true,
        EventKind::Modify(ModifyKind::Metadata(_)) => false,
        EventKind::Modify(_) => true,
        EventKind::Access(_) | EventKind::Any | EventKind::Other => false,
    }
}

fn is_source(path: &Path, target: &Path) -> bool {
    !path.starts_with(target)
        && (path.extension().is_some_and(|e| e == "rs")
            || path.file_name().is_some_and(|n| n == "Cargo.toml"))
}

/// Runs one `cargo build` and reports what came of it.
fn build(crate_dir: &Path, cargo_args: &[String]) {
    let cargo = std::env::var_os("CARGO").map_or_else(|| PathBuf::from("cargo"), PathBuf::from);
    let mut args = vec!["build".to_owned()];
    args.extend(cargo_args.iter().cloned());
    out(&format!("hotsh dev: cargo {}", args.join(" ")));
    // Cargo renders diagnostics to stderr itself and describes its artifacts on stdout.
    args.insert(1, "--message-format=json-render-diagnostics".to_owned());
    let mut child = match crate::executor::spawn_tool(&cargo, &args, crate_dir) {
        Ok(child) => child,
        Err(error) => {
            out(&format!("hotsh dev: cannot run cargo: {error}"));
            return;
        }
    };
    let mut libraries = Vec::new();
    if let Some(stdout) = child.stdout.take() {
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            libraries.extend(cdylib_artifacts(&line));
        }
    }
    match child.wait() {
        Ok(status) if status.success() => {}
        Ok(status) => {
            out(&format!(
                "hotsh dev: build failed ({status}); a watching agent keeps the previous build"
            ));
            return;
        }
        Err(error) => {
            out(&format!("hotsh dev: cannot wait for cargo: {error}"));
            return;
        }
    }
    if libraries.is_empty() {
        out("hotsh dev: built, but no cdylib came out of it (a plugin crate needs \
             crate-type = [\"cdylib\"])");
    }
    for library in libraries {
        match check_in_child(&library) {
            Ok(plugin) => out(&format!(
                "hotsh dev: accepted {} from {}; a watching agent serves it now",
                plugin.one_line(),
                library.display()
            )),
            Err(CheckFailure::NotAPlugin(reason) | CheckFailure::Rejected(reason)) => {
                out(&format!(
                    "hotsh dev: rejected {}: {reason}; a watching agent keeps the previous build",
                    library.display()
                ))
            }
        }
    }
}

/// The shared libraries a `compiler-artifact` message of a cdylib target names.
fn cdylib_artifacts(line: &str) -> Vec<PathBuf> {
    let Ok(message) = serde_json::from_str::<serde_json::Value>(line) else {
        return Vec::new();
    };
    let is_cdylib = message["reason"] == "compiler-artifact"
        && message["target"]["kind"].as_array().is_some_and(|k| k.iter().any(|k| k == "cdylib"));
    if !is_cdylib {
        return Vec::new();
    }
    message["filenames"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f.as_str())
        .map(PathBuf::from)
        .filter(|f| crate::plugins::is_library_name(f))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_cdylib_artifacts_count() {
        let cdylib = r#"{"reason":"compiler-artifact","target":{"kind":["cdylib","rlib"]},"filenames":["/t/debug/libx.so","/t/debug/libx.rlib"]}"#;
        assert_eq!(cdylib_artifacts(cdylib), [PathBuf::from("/t/debug/libx.so")]);
        let rlib = r#"{"reason":"compiler-artifact","target":{"kind":["lib"]},"filenames":["/t/debug/liby.rlib"]}"#;
        assert!(cdylib_artifacts(rlib).is_empty());
        assert!(cdylib_artifacts("not json").is_empty());
    }

    #[test]
    fn reads_and_metadata_are_not_changes() {
        use notify::event::{AccessKind, DataChange, MetadataKind};
        assert!(!is_change(&EventKind::Access(AccessKind::Any)));
        assert!(!is_change(&EventKind::Modify(ModifyKind::Metadata(MetadataKind::Any))));
        assert!(is_change(&EventKind::Modify(ModifyKind::Data(DataChange::Any))));
    }
}
