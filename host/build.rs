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
    lay_out_code();
}

/// Lays out the functions start-up and a command run together, at the start of the code, in
/// the order of `symbol-order.txt` (written by `docs/symbol-order.py`): the kernel maps the
/// executable in page-cache folios of up to 128 KiB, so code a resting agent ran, spread over
/// the whole executable, kept most of it resident (ARCHITECTURE.md, "Memory at rest: the
/// code laid out"). Only for a release build linked by rustc's own LLD (the default for
/// x86_64 Linux since Rust 1.90); `HOTSH_SYMBOL_ORDER=0` turns it off. A name the build no
/// longer has is passed over: a stale list costs memory, never the build.
fn lay_out_code() {
    println!("cargo:rerun-if-changed=symbol-order.txt");
    println!("cargo:rerun-if-env-changed=HOTSH_SYMBOL_ORDER");
    println!("cargo:rerun-if-env-changed=HOTSH_LINK_MAP");
    let env = |name: &str| std::env::var(name).unwrap_or_default();
    // The link map `docs/symbol-order.py` reads to find each function's place.
    let map = env("HOTSH_LINK_MAP");
    if !map.is_empty() {
        println!("cargo:rustc-link-arg-bin=hotsh=-Wl,-Map={map}");
    }
    if env("PROFILE") != "release" || env("HOTSH_SYMBOL_ORDER") == "0" {
        return;
    }
    // rustc's own LLD links for this target unless the build names another linker.
    let rustc = rustc_version().unwrap_or_default();
    let by_lld = env("TARGET") == "x86_64-unknown-linux-gnu"
        && !env("CARGO_ENCODED_RUSTFLAGS").contains("linker")
        && minor(&rustc).is_some_and(|minor| minor >= 90);
    if !by_lld {
        return;
    }
    let order = Path::new(env!("CARGO_MANIFEST_DIR")).join("symbol-order.txt");
    // Its first line says which compiler named its functions (their hashes change with it);
    // the rest (near 1 MB) is the linker's to read.
    let made_with = std::fs::File::open(&order).ok().and_then(|list| {
        use std::io::BufRead as _;
        let first = std::io::BufReader::new(list).lines().next()?.ok()?;
        Some(first.split_once(" with ")?.1.trim().to_owned())
    });
    if made_with.as_deref().is_some_and(|made_with| made_with != rustc) {
        println!(
            "cargo:warning=host/symbol-order.txt was made with {}, this build uses {rustc}: \
             the names differ, so the agent's code is not laid out for memory at rest (4 to \
             6 MiB more); `python3 docs/symbol-order.py` makes the list again",
            made_with.unwrap_or_default()
        );
    }
    println!("cargo:rustc-link-arg-bin=hotsh=-Wl,--symbol-ordering-file={}", order.display());
    println!("cargo:rustc-link-arg-bin=hotsh=-Wl,--no-warn-symbol-ordering");
}

/// The version line of the compiler building hotsh (`rustc 1.95.0 (59807616e 2026-04-14)`).
fn rustc_version() -> Option<String> {
    let rustc = std::env::var_os("RUSTC")?;
    #[allow(
        clippy::disallowed_methods,
        reason = "a build script asking the compiler its version, not a command of the model"
    )]
    let output = std::process::Command::new(rustc).arg("--version").output().ok()?;
    Some(String::from_utf8(output.stdout).ok()?.trim().to_owned())
}

/// The minor version in a compiler's version line (`rustc 1.95.0 (...)` -> 95).
fn minor(version: &str) -> Option<u32> {
    version.split_whitespace().nth(1)?.split('.').nth(1)?.parse().ok()
}
