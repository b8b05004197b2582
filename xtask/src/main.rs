//! `cargo xtask dist [--out DIR] [--download-base URL] [--no-build] [--debug]`: the release a user (or
//! Zed's agent registry) downloads.
//!
//! - Builds `hotsh`, `hotsh-shim` and the plugins hotsh ships (`tool-bash`, `tool-fs`; not the
//!   examples) in the release profile (stripped).
//! - Packs them, with the README, at the root of
//!   `DIR/hotsh-<version>-x86_64-unknown-linux-gnu.tar.gz` (sorted, owned by root, dated
//!   1970: the same inputs give the same bytes), and writes its SHA-256 beside it. Unpacked
//!   anywhere, `./hotsh acp` serves with the plugins beside it (the executable's directory is
//!   a plugin directory), and `./hotsh install` installs it.
//! - Writes `DIR/agent.json`, the ACP Registry's entry for that archive (its URL names the
//!   version), and `DIR/icon.svg`.
//!
//! A task of the workspace rather than a `hotsh dist` subcommand: it builds hotsh itself, and
//! what users run should not carry the release machinery.
//!
//! `cargo xtask check-port [TARGET]` (default `x86_64-apple-darwin`): type-checks every crate
//! but the tests for another system, to prove that Linux's pieces stay behind their seams
//! (ARCHITECTURE.md, "Platforms"). It needs the target's standard library (`rustup target
//! add TARGET`) and clang with llvm-ar, for the one C dependency (`ring`), which is compiled
//! freestanding against the few declarations it needs (written under `target/`); no Apple
//! SDK is used, and nothing is linked.

#![allow(clippy::print_stdout, reason = "a command-line task reports on stdout")]
#![allow(clippy::disallowed_methods, reason = "it runs cargo and tar")]

use anyhow::{Context as _, bail};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// The one platform built and tested here.
const TARGET: &str = "x86_64-unknown-linux-gnu";
/// Its key in the registry's `distribution.binary`.
const REGISTRY_TARGET: &str = "linux-x86_64";
/// What the archive holds, from the release directory.
const SHIPPED: &[&str] = &["hotsh", "hotsh-shim", "libhotsh_tool_bash.so", "libhotsh_tool_fs.so"];

/// hotsh's icon: 16×16, one colour (`currentColor`: the client's theme decides it): a shell
/// prompt `>_` in a rounded frame.
const ICON: &str = r#"<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 16 16" fill="none" stroke="currentColor" stroke-width="1.5" stroke-linecap="round" stroke-linejoin="round"><rect x="1" y="2" width="14" height="12" rx="2"/><path d="M4 6l2.5 2L4 10"/><path d="M8.5 10.5h3.5"/></svg>
"#;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("dist") => match dist(&args[1..]) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("xtask dist: {error:#}");
                ExitCode::FAILURE
            }
        },
        Some("check-port") => match check_port(args.get(1).map_or(PORT_TARGET, String::as_str)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("xtask check-port: {error:#}");
                ExitCode::FAILURE
            }
        },
        _ => {
            eprintln!(
                "usage: cargo xtask dist [--out DIR] [--download-base URL] [--no-build] [--debug]\n\
                 Builds the release archive, its SHA-256, agent.json and icon.svg (default DIR: target/dist).\n\
                 usage: cargo xtask check-port [TARGET]\n\
                 Type-checks the workspace for another system (default {PORT_TARGET})."
            );
            ExitCode::from(2)
        }
    }
}

/// The options of `dist`.
struct Options {
    out: PathBuf,
    /// Where the release's files are downloaded from (the archive's URL is this plus its
    /// name); default: the repository's release of this version.
    download_base: Option<String>,
    build: bool,
    /// Package the debug build instead (to try the archive out, and for the tests).
    debug: bool,
}

fn parse(args: &[String]) -> anyhow::Result<Options> {
    let root = workspace();
    let mut options = Options {
        out: root.join("target").join("dist"),
        download_base: None,
        build: true,
        debug: false,
    };
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--out" => options.out = PathBuf::from(args.next().context("--out needs a DIR")?),
            "--download-base" => {
                options.download_base =
                    Some(args.next().context("--download-base needs a URL")?.clone());
            }
            "--no-build" => options.build = false,
            "--debug" => options.debug = true,
            other => bail!("unknown argument `{other}`"),
        }
    }
    Ok(options)
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_owned)
}

fn dist(args: &[String]) -> anyhow::Result<()> {
    let options = parse(args)?;
    let root = workspace();
    let manifest = |path: &str| -> anyhow::Result<toml::Table> {
        let text = std::fs::read_to_string(root.join(path))
            .with_context(|| format!("cannot read {path}"))?;
        toml::from_str(&text).with_context(|| format!("{path} is not valid"))
    };
    let host = manifest("host/Cargo.toml")?;
    let workspace_manifest = manifest("Cargo.toml")?;
    let package = &workspace_manifest["workspace"]["package"];
    let version = host["package"]["version"].as_str().context("host has no version")?.to_owned();
    let license = package["license"].as_str().context("no license")?.to_owned();
    let repository = package["repository"].as_str().context("no repository")?.to_owned();
    if options.build {
        let mut cargo = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned()));
        cargo.current_dir(&root).arg("build");
        if !options.debug {
            cargo.arg("--release");
        }
        let status = cargo
            .args(["-p", "hotsh-host", "-p", "hotsh-tool-bash", "-p", "hotsh-tool-fs"])
            .status()
            .context("cannot run cargo")?;
        if !status.success() {
            bail!("the release build failed");
        }
    }
    let release = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| root.join("target"), PathBuf::from)
        .join(if options.debug { "debug" } else { "release" });
    let name = format!("hotsh-{version}-{TARGET}");
    let stage = options.out.join(&name);
    if stage.exists() {
        std::fs::remove_dir_all(&stage)?;
    }
    std::fs::create_dir_all(&stage)?;
    for file in SHIPPED {
        let from = release.join(file);
        std::fs::copy(&from, stage.join(file))
            .with_context(|| format!("cannot copy {} (was it built?)", from.display()))?;
    }
    std::fs::copy(root.join("README.md"), stage.join("README.md"))?;
    let archive = options.out.join(format!("{name}.tar.gz"));
    let mut listed: Vec<String> = SHIPPED.iter().map(|f| (*f).to_owned()).collect();
    listed.push("README.md".to_owned());
    listed.sort();
    let status = Command::new("tar")
        .args(["--sort=name", "--owner=0", "--group=0", "--numeric-owner", "--mtime=@0"])
        // `gzip -n`: no name or time in the header.
        .args(["--use-compress-program", "gzip -n", "-cf"])
        .arg(&archive)
        .arg("-C")
        .arg(&stage)
        .args(&listed)
        .status()
        .context("cannot run tar")?;
    if !status.success() {
        bail!("tar failed");
    }
    let bytes = std::fs::read(&archive)?;
    let digest = ring::digest::digest(&ring::digest::SHA256, &bytes);
    let sha256: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    let archive_name = format!("{name}.tar.gz");
    std::fs::write(
        options.out.join(format!("{archive_name}.sha256")),
        format!("{sha256}  {archive_name}\n"),
    )?;
    let base = options
        .download_base
        .unwrap_or_else(|| format!("{repository}/releases/download/v{version}"));
    let entry = serde_json::json!({
        "id": "hotsh",
        "name": "hotsh",
        "version": version,
        "description": "A fast, sandboxed coding agent: commands as live terminal cards, plugins reloaded as you build them, sessions that last, subagents, Claude Code's hooks and agents.",
        "repository": repository,
        "authors": ["The hotsh developers"],
        "license": license,
        "license_url": format!("{repository}#license"),
        "distribution": {
            "binary": {
                REGISTRY_TARGET: {
                    "archive": format!("{base}/{archive_name}"),
                    "cmd": "./hotsh",
                    "args": ["acp"],
                    "sha256": sha256,
                }
            }
        }
    });
    std::fs::write(options.out.join("agent.json"), serde_json::to_string_pretty(&entry)? + "\n")?;
    std::fs::write(options.out.join("icon.svg"), ICON)?;
    let hotsh = std::fs::read(stage.join("hotsh"))?;
    println!("{} ({} bytes, sha256 {sha256})", archive.display(), bytes.len());
    println!("  hotsh {} bytes, needs glibc {} or newer", hotsh.len(), glibc_floor(&hotsh));
    println!("{}", options.out.join("agent.json").display());
    println!("{}", options.out.join("icon.svg").display());
    Ok(())
}

/// The newest `GLIBC_x.y` symbol version an executable asks for: the oldest glibc it runs on.
fn glibc_floor(binary: &[u8]) -> String {
    let mut newest: Option<Vec<u32>> = None;
    let needle = b"GLIBC_";
    let mut at = 0;
    while let Some(found) = binary[at..].windows(needle.len()).position(|w| w == needle) {
        let start = at + found + needle.len();
        let end = binary[start..]
            .iter()
            .position(|b| !(b.is_ascii_digit() || *b == b'.'))
            .map_or(binary.len(), |n| start + n);
        let parts: Option<Vec<u32>> = std::str::from_utf8(&binary[start..end])
            .ok()
            .filter(|text| !text.is_empty())
            .map(|text| text.split('.').filter_map(|p| p.parse().ok()).collect());
        if let Some(parts) = parts.filter(|p| !p.is_empty())
            && newest.as_ref().is_none_or(|n| parts > *n)
        {
            newest = Some(parts);
        }
        at = end.max(start);
    }
    newest.map_or_else(
        || "(unknown)".to_owned(),
        |parts| parts.iter().map(ToString::to_string).collect::<Vec<_>>().join("."),
    )
}

/// The system a port would go to first.
const PORT_TARGET: &str = "x86_64-apple-darwin";

/// The declarations `ring`'s C needs when compiled freestanding for a system whose headers
/// are not here (only type-checked against: nothing is linked).
const PORT_HEADERS: &[(&str, &str)] = &[
    ("TargetConditionals.h", "#define TARGET_OS_IPHONE 0\n#define TARGET_OS_OSX 1\n"),
    ("assert.h", "#define assert(x) ((void)0)\n"),
    (
        "string.h",
        "#include <stddef.h>\nvoid *memcpy(void *, const void *, size_t);\n\
         void *memmove(void *, const void *, size_t);\nvoid *memset(void *, int, size_t);\n\
         int memcmp(const void *, const void *, size_t);\nsize_t strlen(const char *);\n",
    ),
];

fn check_port(target: &str) -> anyhow::Result<()> {
    let root = workspace();
    let include = root.join("target").join("port-include");
    std::fs::create_dir_all(&include).context("cannot make target/port-include")?;
    for (name, text) in PORT_HEADERS {
        std::fs::write(include.join(name), text).with_context(|| format!("cannot write {name}"))?;
    }
    let variable = target.replace('-', "_");
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned()))
        .current_dir(&root)
        .args(["check", "--workspace", "--exclude", "hotsh-tests", "--all-targets", "--target"])
        .arg(target)
        .env(format!("CC_{variable}"), "clang")
        .env(format!("AR_{variable}"), "llvm-ar")
        .env(
            format!("CFLAGS_{variable}"),
            format!("--target={target} -ffreestanding -I{}", include.display()),
        )
        .status()
        .context("cannot run cargo")?;
    if !status.success() {
        bail!(
            "the workspace does not check for {target} (the target's library comes from \
             `rustup target add {target}`; clang and llvm-ar from the packages clang and llvm)"
        );
    }
    println!("the workspace checks for {target}: Linux's pieces are behind their seams");
    Ok(())
}
