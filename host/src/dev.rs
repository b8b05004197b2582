//! `hotsh dev [CRATE_DIR] [-- CARGO_BUILD_ARGS…]`: rebuilds a plugin crate whenever its
//! sources change, so that a running agent that watches the build's output directory serves
//! the new code without the author running cargo by hand.
//!
//! It builds once at start, then after every change to a `.rs` file or `Cargo.toml` under the
//! crate (outside `target/`), once the sources have been quiet for 200 ms. Builds never
//! overlap: changes made during a build cause one more build after it.

use crate::executor::run_attached;
use anyhow::Context as _;
use notify::{RecursiveMode, Watcher as _};
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
        if event.paths.iter().any(|p| is_source(p, &target)) {
            let _ = changed.send(());
        }
    })?;
    watcher
        .watch(&crate_dir, RecursiveMode::Recursive)
        .with_context(|| format!("cannot watch {}", crate_dir.display()))?;
    eprintln!("hotsh dev: watching {} (Ctrl-C to stop)", crate_dir.display());
    loop {
        build(&crate_dir, cargo_args);
        // Wait for a change, then for the sources to be quiet.
        if changes.recv().is_err() {
            return Ok(ExitCode::SUCCESS);
        }
        while changes.recv_timeout(QUIET).is_ok() {}
    }
}

fn is_source(path: &Path, target: &Path) -> bool {
    !path.starts_with(target)
        && (path.extension().is_some_and(|e| e == "rs")
            || path.file_name().is_some_and(|n| n == "Cargo.toml"))
}

fn build(crate_dir: &Path, cargo_args: &[String]) {
    let cargo = std::env::var_os("CARGO").map_or_else(|| PathBuf::from("cargo"), PathBuf::from);
    let mut args = vec!["build".to_owned()];
    args.extend(cargo_args.iter().cloned());
    eprintln!("hotsh dev: cargo {}", args.join(" "));
    match run_attached(&cargo, &args, crate_dir) {
        Ok(status) if status.success() => {
            eprintln!("hotsh dev: built; a watching agent loads it now")
        }
        Ok(status) => {
            eprintln!("hotsh dev: build failed ({status}); the agent keeps the previous build")
        }
        Err(error) => eprintln!("hotsh dev: cannot run cargo: {error}"),
    }
}
