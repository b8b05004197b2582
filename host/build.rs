//! Build script: records the commit hotsh was built from, for `hotsh --version`.

use std::path::Path;

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    // Rebuild when the checked-out commit changes (HEAD moves, or the branch it names does).
    for watched in [".git/HEAD", ".git/refs/heads", ".git/packed-refs"] {
        let path = root.join(watched);
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    #[allow(
        clippy::disallowed_methods,
        reason = "a build script asking git, not a command of the model"
    )]
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(&root)
        .output()
        .ok()
        .filter(|output| output.status.success())
        .and_then(|output| String::from_utf8(output.stdout).ok())
        .map(|commit| commit.trim().to_owned())
        .filter(|commit| !commit.is_empty())
        .unwrap_or_else(|| "unknown commit".to_owned());
    println!("cargo:rustc-env=HOTSH_COMMIT={commit}");
}
