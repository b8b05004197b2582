//! The harness of the end-to-end tests: starts the real `hotsh` binary, talks JSON-RPC to it
//! over stdio like an editor would, and records everything it sends back.
//!
//! Waits are for events (a response, a notification), with generous deadlines that only
//! turn a hang into a failure; no test relies on timing.

#![allow(clippy::disallowed_methods, reason = "the harness starts hotsh and builds plugins")]

use serde_json::{Value, json};

pub mod mcp_fixture;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long any single wait may take before the test fails as hung.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// The workspace root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ has a parent").to_owned()
}

fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned())
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| workspace().join("target"), PathBuf::from)
}

/// Builds `hotsh`, the tool-bash plugin and the example plugin (once per test process) and returns the directory
/// holding both.
pub fn build_dir() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        prebuilt_dir().unwrap_or_else(|| build_packages(Profile::Debug, &["hotsh-plugin-hello"]))
    })
}

/// The environment variable naming a directory that holds copies of the builds the tests
/// need (`hotsh`, its shim, the plugins, fixture builds under `fixture-builds/`), for a run
/// without cargo: the suite's run as an ordinary user (`as_nobody.rs`).
pub const PREBUILT: &str = "HOTSH_TESTS_BUILD_DIR";

fn prebuilt_dir() -> Option<PathBuf> {
    std::env::var_os(PREBUILT).map(PathBuf::from)
}

/// A fixture build from [`PREBUILT`], when the tests run from copies.
fn prebuilt_fixture(key: &str, kept_as: &str) -> Option<PathBuf> {
    let path = prebuilt_dir()?.join("fixture-builds").join(format!("{key}-Debug")).join(kept_as);
    assert!(path.exists(), "{} was not copied for this run without cargo", path.display());
    Some(path)
}

/// Builds `hotsh` and its two plugins, and `more` packages, in `profile`; returns the
/// directory holding the build.
pub fn build_packages(profile: Profile, more: &[&str]) -> PathBuf {
    let mut args = vec!["build"];
    if profile == Profile::Release {
        args.push("--release");
    }
    for package in ["hotsh-host", "hotsh-tool-bash", "hotsh-tool-fs"].iter().chain(more) {
        args.extend(["-p", package]);
    }
    let status =
        Command::new(cargo()).args(&args).current_dir(workspace()).status().expect("cargo runs");
    assert!(status.success(), "building hotsh failed: cargo {}", args.join(" "));
    target_dir().join(if profile == Profile::Release { "release" } else { "debug" })
}

/// The release task (`cargo xtask`), built.
pub fn xtask_binary() -> PathBuf {
    let status = Command::new(cargo())
        .args(["build", "-p", "xtask"])
        .current_dir(workspace())
        .status()
        .expect("cargo runs");
    assert!(status.success(), "building xtask failed");
    target_dir().join("debug").join("xtask")
}

/// The tests' MCP server (`mcp_fixture`), built in `profile`.
pub fn mcp_fixture_binary(profile: Profile) -> PathBuf {
    let mut args = vec!["build", "-p", "hotsh-tests", "--bin", "mcp-fixture"];
    if profile == Profile::Release {
        args.push("--release");
    }
    let status =
        Command::new(cargo()).args(&args).current_dir(workspace()).status().expect("cargo runs");
    assert!(status.success(), "building the MCP fixture failed: cargo {}", args.join(" "));
    target_dir()
        .join(if profile == Profile::Release { "release" } else { "debug" })
        .join("mcp-fixture")
}

pub fn hotsh_binary() -> PathBuf {
    build_dir().join("hotsh")
}

/// The small shim executable `hotsh` starts for every command.
pub fn shim_binary() -> PathBuf {
    build_dir().join("hotsh-shim")
}

pub fn tool_fs_plugin() -> PathBuf {
    build_dir().join("libhotsh_tool_fs.so")
}

pub fn tool_bash_plugin() -> PathBuf {
    build_dir().join("libhotsh_tool_bash.so")
}

/// The example plugin (`examples/plugin-hello`).
pub fn hello_plugin() -> PathBuf {
    build_dir().join("libhotsh_plugin_hello.so")
}

/// Fixture builds share `target/fixtures`; one at a time, so that a build and the copy of its
/// output are never interleaved with another build of the same library name.
static FIXTURE_BUILDS: Mutex<Option<HashMap<String, PathBuf>>> = Mutex::new(None);

/// Runs `cargo build` for the crate at `manifest` into `target/fixtures` and returns the
/// library `built` it produced, copied to `target/fixture-builds/<key>/<kept_as>`. Cached by
/// `key` for the test process. Every crate built here must have a library name of its own:
/// cargo does not refresh `target/fixtures/debug/<lib>` when a build is already up to date.
fn build_fixture(key: &str, manifest: &Path, built: &str, kept_as: &str) -> PathBuf {
    build_fixture_in(Profile::Debug, key, manifest, built, kept_as)
}

/// The cargo profile of a fixture build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    Debug,
    Release,
}

fn build_fixture_in(
    profile: Profile,
    key: &str,
    manifest: &Path,
    built: &str,
    kept_as: &str,
) -> PathBuf {
    let key = format!("{key}-{profile:?}");
    let mut builds = FIXTURE_BUILDS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let builds = builds.get_or_insert_with(HashMap::new);
    if let Some(path) = builds.get(&key) {
        return path.clone();
    }
    let out = cargo_build_fixture(manifest, profile);
    // Kept under a library name, so that it can be linked into a plugin directory as is.
    let kept = target_dir().join("fixture-builds").join(&key).join(kept_as);
    std::fs::create_dir_all(kept.parent().expect("has a parent")).expect("fixture-builds dir");
    std::fs::copy(out.join(built), &kept).expect("copy the fixture build");
    builds.insert(key, kept.clone());
    kept
}

/// Runs a real `cargo build` of the crate at `manifest` into `target/fixtures`; returns the
/// directory cargo put its library in.
fn cargo_build_fixture(manifest: &Path, profile: Profile) -> PathBuf {
    let (flag, out) = match profile {
        Profile::Debug => ("--profile=dev", "debug"),
        Profile::Release => ("--release", "release"),
    };
    let status = Command::new(cargo())
        .args(["build", "--quiet", flag, "--manifest-path"])
        .arg(manifest)
        .arg("--target-dir")
        .arg(fixture_target_dir())
        .status()
        .expect("cargo runs");
    assert!(status.success(), "building the fixture {} failed", manifest.display());
    fixture_target_dir().join(out)
}

/// Builds a fixture plugin from `tests/fixtures/<name>` (once per test process) into
/// `target/fixtures`, away from the `hotsh` binary, and returns the library's path.
pub fn fixture_plugin(name: &str) -> PathBuf {
    let manifest = workspace().join("tests/fixtures").join(name).join("Cargo.toml");
    let library = format!("libhotsh_fixture_{}.so", name.replace('-', "_"));
    build_fixture(name, &manifest, &library, &library)
}

/// Which interface a fixture build is compiled against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interface {
    /// This checkout's hotsh-abi.
    Same,
    /// A copy of hotsh-abi whose `ToolCall` has an extra field: a layout mismatch.
    ChangedLayout,
    /// A copy of hotsh-abi versioned `OTHER_ABI_VERSION`: another major version, newer than
    /// this one.
    NewerMajor,
    /// A copy of hotsh-abi versioned `OLDER_ABI_VERSION`: the unreleased interface before 1.0.
    PreRelease,
}

/// A build of the `reloadable` fixture whose tools answer `build <label>`, compiled against
/// `interface`. The library is `libhotsh_fixture_reloadable.so` in every case.
pub fn reloadable_build(label: &str, interface: Interface) -> PathBuf {
    reloadable_build_in(Profile::Debug, label, interface)
}

/// [`reloadable_build`] in a given profile (the benchmarks use release builds).
pub fn reloadable_build_in(profile: Profile, label: &str, interface: Interface) -> PathBuf {
    let key = format!("reloadable-{label}-{interface:?}");
    let source = target_dir().join("fixture-src").join(&key);
    let template = workspace().join("tests/fixtures/reloadable");
    let abi = match interface {
        Interface::Same => workspace().join("abi"),
        changed => changed_interface(changed),
    };
    // A package (and so a library) name of its own for every variant.
    let package = format!("hotsh-fixture-reloadable-{label}-{interface:?}").to_lowercase();
    let name = format!("name = {package:?}");
    let abi = format!("path = {:?}", abi.display().to_string());
    copy_fixture_file(
        &template,
        &source,
        "Cargo.toml",
        &[("name = \"hotsh-fixture-reloadable\"", &name), ("path = \"../../../abi\"", &abi)],
    );
    copy_fixture_file(&template, &source, "src/lib.rs", &[("\"original\"", &format!("{label:?}"))]);
    let built = format!("lib{}.so", package.replace('-', "_"));
    build_fixture_in(
        profile,
        &key,
        &source.join("Cargo.toml"),
        &built,
        "libhotsh_fixture_reloadable.so",
    )
}

/// A build of the `hooked` fixture (a hotsh-abi 1.1 plugin with hooks, against the frozen
/// 1.1) whose answers name `label` (`hooked build <label>`), kept as
/// `libhotsh_fixture_hooked.so`.
pub fn hooked_build(label: &str) -> PathBuf {
    let key = format!("hooked-{label}");
    let source = target_dir().join("fixture-src").join(&key);
    let template = workspace().join("tests/fixtures/hooked");
    let package = format!("hotsh-fixture-{key}");
    let name = format!("name = {package:?}");
    let abi = workspace().join("tests/fixtures/abi-1.1");
    let abi = format!("path = {:?}", abi.display().to_string());
    copy_fixture_file(
        &template,
        &source,
        "Cargo.toml",
        &[("name = \"hotsh-fixture-hooked\"", &name), ("path = \"../abi-1.1\"", &abi)],
    );
    copy_fixture_file(
        &template,
        &source,
        "Cargo.lock",
        &[("\"hotsh-fixture-hooked\"", &format!("{package:?}"))],
    );
    let label = format!("const LABEL: &str = \"hooked build {label}\";");
    copy_fixture_file(
        &template,
        &source,
        "src/lib.rs",
        &[("const LABEL: &str = \"hooked build one\";", &label)],
    );
    let built = format!("lib{}.so", package.replace('-', "_"));
    build_fixture(&key, &source.join("Cargo.toml"), &built, "libhotsh_fixture_hooked.so")
}

/// A build of the `misbehaving` fixture in `mode` (`well-behaved`, `abort-in-manifest`,
/// `hang-in-tools`), kept as `libhotsh_fixture_misbehaving.so`.
pub fn misbehaving_build(mode: &str) -> PathBuf {
    let key = format!("misbehaving-{mode}");
    if let Some(prebuilt) = prebuilt_fixture(&key, "libhotsh_fixture_misbehaving.so") {
        return prebuilt;
    }
    let source = target_dir().join("fixture-src").join(&key);
    let template = workspace().join("tests/fixtures/misbehaving");
    let package = format!("hotsh-fixture-{key}");
    let name = format!("name = {package:?}");
    let abi = format!("path = {:?}", workspace().join("abi").display().to_string());
    copy_fixture_file(
        &template,
        &source,
        "Cargo.toml",
        &[("name = \"hotsh-fixture-misbehaving\"", &name), ("path = \"../../../abi\"", &abi)],
    );
    let mode = format!("const MODE: &str = {mode:?};");
    copy_fixture_file(
        &template,
        &source,
        "src/lib.rs",
        &[("const MODE: &str = \"well-behaved\";", &mode)],
    );
    let built = format!("lib{}.so", package.replace('-', "_"));
    build_fixture(&key, &source.join("Cargo.toml"), &built, "libhotsh_fixture_misbehaving.so")
}

/// A copy of the library at `good` with its `.text` section overwritten by `byte` (same size,
/// still a complete ELF file): loading it crashes the process that loads it.
pub fn corrupted_copy(good: &Path, byte: u8, into: &Path) {
    let mut bytes = std::fs::read(good).expect("read the good build");
    let (offset, size) = elf_section(&bytes, ".text").expect("a .text section");
    bytes[offset..offset + size].fill(byte);
    std::fs::write(into, bytes).expect("write the corrupted build");
}

/// The file offset and size of a section of a 64-bit little-endian ELF file.
fn elf_section(bytes: &[u8], wanted: &str) -> Option<(usize, usize)> {
    let u16_at = |at: usize| u16::from_le_bytes([bytes[at], bytes[at + 1]]) as usize;
    let u32_at =
        |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) as usize;
    let u64_at =
        |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes")) as usize;
    let (table, entry_size, count, names_index) =
        (u64_at(0x28), u16_at(0x3A), u16_at(0x3C), u16_at(0x3E));
    let header = |index: usize| table + index * entry_size;
    let names = u64_at(header(names_index) + 0x18);
    (0..count).find_map(|index| {
        let at = header(index);
        let name_at = names + u32_at(at);
        let name = bytes[name_at..].split(|&b| b == 0).next()?;
        (name == wanted.as_bytes()).then(|| (u64_at(at + 0x18), u64_at(at + 0x20)))
    })
}

/// Writes a crate at `dir`: the reloadable fixture renamed to `name` (package
/// `hotsh-fixture-<name>`, tools `<name>_build`, …) whose tools answer `build <label>`.
pub fn write_renamed_fixture(dir: &Path, name: &str, label: &str) {
    let template = workspace().join("tests/fixtures/reloadable");
    let abi = workspace().join("abi");
    let abi = format!("path = {:?}", abi.display().to_string());
    copy_fixture_file(
        &template,
        dir,
        "Cargo.toml",
        &[("path = \"../../../abi\"", &abi), ("reloadable", name)],
    );
    let label = format!("{label:?}");
    copy_fixture_file(
        &template,
        dir,
        "src/lib.rs",
        &[("\"original\"", &label), ("reloadable", name)],
    );
}

/// The directory cargo puts fixture libraries in (`target/fixtures/debug`).
pub fn fixture_output_dir() -> PathBuf {
    fixture_target_dir().join("debug")
}

/// Writes the `cargoflow` plugin with build label `label` and runs a real `cargo build` of it
/// into `target/fixtures`; returns the directory cargo put the library in.
pub fn cargo_build_cargoflow(label: &str) -> PathBuf {
    let source = target_dir().join("fixture-src").join("cargoflow");
    write_renamed_fixture(&source, "cargoflow", label);
    cargo_build_fixture(&source.join("Cargo.toml"), Profile::Debug)
}

/// `target/fixtures`, the target directory of fixture builds.
pub fn fixture_target_dir() -> PathBuf {
    target_dir().join("fixtures")
}

/// The version of hotsh-abi in this checkout.
pub const ABI_VERSION: &str = "1.1.0";
/// Another minor version of it (which abi_stable refuses).
pub const OTHER_ABI_VERSION: &str = "2.0.0";
/// An older minor version of it (refused too).
pub const OLDER_ABI_VERSION: &str = "0.4.0";

/// A copy of hotsh-abi with one change, for builds that must be rejected.
fn changed_interface(interface: Interface) -> PathBuf {
    let dir = target_dir().join("fixture-src").join(format!("abi-{interface:?}"));
    let version = match interface {
        Interface::NewerMajor => OTHER_ABI_VERSION,
        Interface::PreRelease => OLDER_ABI_VERSION,
        Interface::Same | Interface::ChangedLayout => ABI_VERSION,
    };
    let manifest = format!(
        "[package]\nname = \"hotsh-abi\"\nversion = \"{version}\"\nedition = \"2024\"\n\n\
         [dependencies]\nabi_stable = {{ version = \"0.11.3\", default-features = false }}\n\
         serde = {{ version = \"1\", features = [\"derive\"] }}\nserde_json = \"1\"\n"
    );
    write_if_changed(&dir.join("Cargo.toml"), &manifest);
    for file in ["lib.rs", "v1.rs", "__private.rs", "sandbox.rs", "load.rs"] {
        let mut code =
            std::fs::read_to_string(workspace().join("abi/src").join(file)).expect("abi source");
        if interface == Interface::ChangedLayout && file == "v1.rs" {
            let field = "    pub call_id: RString,\n";
            assert!(code.contains(field), "ToolCall has changed; update the fixture");
            code = code.replacen(field, &format!("{field}    pub added_field: u64,\n"), 1);
        }
        write_if_changed(&dir.join("src").join(file), &code);
    }
    dir
}

/// Which hotsh-abi 1.x the `plugin-abi-1.0` fixture is built against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compat {
    /// The frozen copy of hotsh-abi 1.0 (`tests/fixtures/abi-1.0`), with the fixture's lock file.
    V1_0,
    /// [`derived_later_abi`]: a later 1.x (1.2), the frozen 1.1 with one thing of each kind
    /// appended.
    Later,
}

/// A build of the `plugin-abi-1.0` fixture against `interface`, kept as
/// `libhotsh_fixture_compat.so` (both builds are the plugin `compat`).
pub fn compat_build(interface: Compat) -> PathBuf {
    let template = workspace().join("tests/fixtures/plugin-abi-1.0");
    let manifest = match interface {
        Compat::V1_0 => template.join("Cargo.toml"),
        Compat::Later => {
            let source = target_dir().join("fixture-src").join("plugin-abi-1.1");
            let abi = format!("path = {:?}", derived_later_abi());
            copy_fixture_file(
                &template,
                &source,
                "Cargo.toml",
                &[
                    ("name = \"hotsh-fixture-abi-1-0\"", "name = \"hotsh-fixture-abi-1-1\""),
                    ("path = \"../abi-1.0\"", &abi),
                    ("abi-1-1 = []", "default = [\"abi-1-1\"]\nabi-1-1 = []"),
                ],
            );
            copy_fixture_file(&template, &source, "src/lib.rs", &[]);
            copy_fixture_file(&template, &source, "Cargo.lock", &[]);
            source.join("Cargo.toml")
        }
    };
    let built = match interface {
        Compat::V1_0 => "libhotsh_fixture_abi_1_0.so",
        Compat::Later => "libhotsh_fixture_abi_1_1.so",
    };
    build_fixture(&format!("compat-{interface:?}"), &manifest, built, "libhotsh_fixture_compat.so")
}

/// A later hotsh-abi 1.x (1.2): the frozen 1.1 with what a later 1.x may append, one of each
/// kind: a variant of `Card`
/// (`Notice`), values of `ToolKind` (`Browse`) and `SandboxMode` (`NetworkOnly`), a field of
/// `GenericCard` (`subtitle`, over its extensions), a function of the plugin module
/// (`describe`, with a default in `Plugin`) and a host service (`host_name`, with a default
/// body).
/// Written under `target/fixture-src/abi-1.1`; returns its directory.
pub fn derived_later_abi() -> PathBuf {
    let frozen = workspace().join("tests/fixtures/abi-1.1");
    let dir = target_dir().join("fixture-src").join("abi-later");
    let appended: &[(&str, &str, &str)] = &[
        ("Cargo.toml", "version = \"1.1.0\"\n", "version = \"1.2.0\"\n"),
        (
            "src/v1.rs",
            "    Generic(GenericCard),\n}\n",
            "    Generic(GenericCard),\n    /// A notice (added in 1.1).\n    Notice(RString),\n}\n",
        ),
        (
            "src/v1.rs",
            "    Other = 8, \"other\";\n",
            "    Other = 8, \"other\";\n    /// Browses (added in 1.1).\n    Browse = 9, \"browse\";\n",
        ),
        (
            "src/v1.rs",
            "    DangerFullAccess = 2, \"danger-full-access\";\n",
            "    DangerFullAccess = 2, \"danger-full-access\";\n    \
             /// Only the network (added in 1.1).\n    NetworkOnly = 3, \"network-only\";\n",
        ),
        (
            "src/v1.rs",
            "    fn write_text_file(&self, write: FileWrite) -> RResult<FileWritten, RString>;\n",
            "    fn write_text_file(&self, write: FileWrite) -> RResult<FileWritten, RString>;\n\n    \
             /// The host's name (added in 1.1); what a host without it answers.\n    \
             fn host_name(&self) -> RString {\n        \"a host without host_name\".into()\n    }\n",
        ),
        (
            "src/v1.rs",
            "    pub run_hook: extern \"C\" fn(&HookCall, HostRef<'_>) -> RResult<HookAnswer, RString>,\n",
            "    pub run_hook: extern \"C\" fn(&HookCall, HostRef<'_>) -> RResult<HookAnswer, RString>,\n    \
             /// What the plugin says of itself (added in 1.1).\n    \
             pub describe: extern \"C\" fn() -> RResult<RString, RString>,\n",
        ),
        (
            "src/v1.rs",
            "    fn shutdown() {}\n",
            "    fn shutdown() {}\n    /// What the plugin says of itself (added in 1.1).\n    \
             fn describe() -> String {\n        String::new()\n    }\n",
        ),
        (
            "src/v1.rs",
            "/// A place in a file.\n",
            "impl GenericCard {\n    /// A second line under the title (added in 1.1); `None` from an older plugin.\n    \
             pub fn subtitle(&self) -> Option<String> {\n        self.extensions.get(\"subtitle\")\n    }\n\n    \
             /// With a second line under the title.\n    #[must_use]\n    \
             pub fn with_subtitle(mut self, subtitle: &str) -> Self {\n        \
             self.extensions.set(\"subtitle\", subtitle);\n        self\n    }\n}\n\n/// A place in a file.\n",
        ),
        (
            "src/lib.rs",
            "            fn module() -> PluginModuleRef {\n",
            "            extern \"C\" fn describe() -> RResult<RString, RString> {\n                \
             guard(\"describe\", || Ok(<$plugin as $crate::Plugin>::describe().into()))\n            }\n\n            \
             fn module() -> PluginModuleRef {\n",
        ),
        (
            "src/lib.rs",
            "                    run_hook,\n",
            "                    run_hook,\n                    describe,\n",
        ),
    ];
    for file in [
        "Cargo.toml",
        "src/lib.rs",
        "src/v1.rs",
        "src/__private.rs",
        "src/sandbox.rs",
        "src/load.rs",
    ] {
        let mut text = std::fs::read_to_string(frozen.join(file)).expect("frozen hotsh-abi 1.1");
        for (_, anchor, replacement) in appended.iter().filter(|(f, _, _)| *f == file) {
            assert_eq!(
                text.matches(anchor).count(),
                1,
                "{file} of hotsh-abi 1.1 changed: {anchor}"
            );
            text = text.replace(anchor, replacement);
        }
        write_if_changed(&dir.join(file), &text);
    }
    dir
}

/// A small loader built against [`derived_later_abi`] (`tests/fixtures/host-abi-1.1`), standing
/// for a hotsh that knows what 1.1 appended; returns the binary.
pub fn host_knowing_later_abi() -> PathBuf {
    let template = workspace().join("tests/fixtures/host-abi-1.1");
    let source = target_dir().join("fixture-src").join("host-abi-1.1");
    let abi = format!("path = {:?}", derived_later_abi());
    copy_fixture_file(&template, &source, "Cargo.toml", &[("path = \"../abi-1.0\"", &abi)]);
    copy_fixture_file(&template, &source, "src/main.rs", &[]);
    // The lock of the plugin built against the same interface.
    let plugin = workspace().join("tests/fixtures/plugin-abi-1.0");
    copy_fixture_file(&plugin, &source, "Cargo.lock", &[]);
    build_fixture(
        "host-abi-1.1",
        &source.join("Cargo.toml"),
        "hotsh-fixture-host-abi-1-1",
        "host-abi-1.1",
    )
}

/// Writes `file` of the fixture crate at `template` into `dest`, with each `(from, to)` of
/// `replacements` replaced throughout (unless `dest` already holds that text).
fn copy_fixture_file(template: &Path, dest: &Path, file: &str, replacements: &[(&str, &str)]) {
    let path = template.join(file);
    let mut text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read the fixture file {}: {e}", path.display()));
    for (from, to) in replacements {
        text = text.replace(from, to);
    }
    write_if_changed(&dest.join(file), &text);
}

/// Writes a file unless it already holds `text` (so cargo sees no change).
fn write_if_changed(path: &Path, text: &str) {
    if std::fs::read_to_string(path).is_ok_and(|old| old == text) {
        return;
    }
    std::fs::create_dir_all(path.parent().expect("has a parent")).expect("source dir");
    std::fs::write(path, text).expect("write fixture source");
}

/// Puts `library` into `dir` as `name` the way cargo finishes a build: the old file is
/// removed and a new file (a new inode) is hard-linked in its place.
pub fn install_like_cargo(library: &Path, dir: &Path, name: &str) {
    static STAGED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let staging = dir.parent().expect("plugin dir has a parent").join("staging");
    std::fs::create_dir_all(&staging).expect("staging dir");
    let n = STAGED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let staged = staging.join(format!("{n}-{name}"));
    std::fs::copy(library, &staged).expect("stage the build");
    let target = dir.join(name);
    let _ = std::fs::remove_file(&target);
    std::fs::hard_link(&staged, &target).expect("link the build in");
}

/// A scripted model response (see the README for the format).
pub fn bash_call(command: &str) -> Value {
    json!({"tool_calls": [{"name": "bash", "arguments": {"command": command}}]})
}

/// A call of tool `name` without arguments, as the scripted model makes it.
pub fn tool_call(name: &str) -> Value {
    call_with(name, json!({}))
}

/// A call of tool `name` with `arguments`, as the scripted model makes it.
pub fn call_with(name: &str, arguments: Value) -> Value {
    json!({"tool_calls": [{"name": name, "arguments": arguments}]})
}

pub fn say(text: &str) -> Value {
    json!({"text": text})
}

/// How to start an agent.
#[derive(Debug, Clone)]
pub struct AgentOptions {
    /// What the scripted model answers, each session from the start of the list.
    pub responses: Vec<Value>,
    /// When not empty, the Nth session to ask the model plays the Nth list instead.
    pub per_session: Vec<Vec<Value>>,
    /// Plugin files placed (as links) in the agent's plugin directory.
    pub plugins: Vec<PathBuf>,
    /// Extra environment for the agent process.
    pub env: Vec<(String, String)>,
    /// Start `hotsh` with no arguments at all (no model, plugins from its own directory).
    pub bare: bool,
    /// The configuration file's text (TOML), passed with `--config`.
    pub config: Option<String>,
    /// More plugin directories, after the agent's own (relative: inside its working
    /// directory).
    pub extra_plugin_dirs: Vec<PathBuf>,
    /// Load the default plugin directories too (the executable's and the data directory's).
    pub default_plugins: bool,
    /// Give the flags to `hotsh` itself rather than to `hotsh acp`.
    pub without_acp_word: bool,
    /// Instead of the scripted model: these arguments (e.g. `--model openai:NAME --base-url
    /// …`).
    pub model_args: Option<Vec<String>>,
    /// Run hotsh as this user and group (the test must run as root), with its scratch
    /// directory handed to that user.
    pub run_as: Option<(u32, u32)>,
    /// Start hotsh with this soft limit on open files.
    pub soft_open_files: Option<u32>,
    /// Record an arc to this file (`--record`).
    pub record: Option<PathBuf>,
    /// Run a copy of `hotsh` with no `hotsh-shim` beside it.
    pub without_shim: bool,
    /// Run this `hotsh` instead of the workspace's build (an unpacked release, say).
    pub executable: Option<PathBuf>,
    /// The agent's home is its working directory (`HOME`, the XDG directories and so the data
    /// directory and the configuration file inside it), as when an editor opens `$HOME`;
    /// `config` is written to `~/.config/hotsh/config.toml` instead of `--config`.
    pub home_is_workdir: bool,
    /// With `home_is_workdir`: the configuration and data directory named by flags
    /// (`--config`, `--data-dir`) outside the home, as a Zed entry with its own may do.
    pub flags_outside_home: bool,
    /// Start hotsh with this file open for writing on descriptor 7, not close-on-exec, as a
    /// careless client would leave one.
    pub inherited_file: Option<PathBuf>,
    /// Close the read end of hotsh's stderr pipe at once (a client that keeps no log: every
    /// write hotsh makes to stderr then fails with a broken pipe).
    pub stderr_closed: bool,
}

impl AgentOptions {
    /// Scripted with `responses`, serving build A of the `reloadable` fixture.
    pub fn serving_reloadable_a(responses: Vec<Value>) -> Self {
        let mut options = Self::script(responses);
        options.plugins = vec![reloadable_build("A", Interface::Same)];
        options
    }

    /// An agent talking to `provider` as `openai:test-model`, with a key in `HOTSH_API_KEY`.
    pub fn with_provider(provider: &FakeProvider) -> Self {
        let mut options = Self::with_model_at(&provider.base_url);
        options.env = vec![("HOTSH_API_KEY".into(), "sk-test-0a1b2c3d4e5f".into())];
        options
    }

    /// The model `openai:test-model` at `base_url`, with no key (a local server's).
    pub fn with_model_at(base_url: &str) -> Self {
        let mut options = Self::script(vec![]);
        options.model_args = Some(vec![
            "--model".into(),
            "openai:test-model".into(),
            "--base-url".into(),
            base_url.to_owned(),
        ]);
        options
    }

    pub fn script(responses: Vec<Value>) -> Self {
        Self {
            responses,
            per_session: Vec::new(),
            plugins: vec![tool_bash_plugin()],
            env: Vec::new(),
            bare: false,
            config: None,
            extra_plugin_dirs: Vec::new(),
            default_plugins: false,
            without_acp_word: false,
            model_args: None,
            run_as: None,
            soft_open_files: None,
            record: None,
            without_shim: false,
            executable: None,
            home_is_workdir: false,
            flags_outside_home: false,
            inherited_file: None,
            stderr_closed: false,
        }
    }

    pub fn bare() -> Self {
        Self { plugins: Vec::new(), bare: true, default_plugins: true, ..Self::script(Vec::new()) }
    }
}

/// A running `hotsh acp` with its own scratch directory.
#[allow(missing_debug_implementations, reason = "holds a child process and channels")]
pub struct Agent {
    child: Child,
    stdin: Option<ChildStdin>,
    incoming: Receiver<Value>,
    /// Every message received so far, in order.
    pub received: Vec<Value>,
    next_id: u64,
    pub dir: tempfile::TempDir,
    /// The session's working directory (inside `dir`).
    pub workdir: PathBuf,
    stderr: std::sync::Arc<Mutex<String>>,
    home_is_workdir: bool,
    /// The client stops reading hotsh's stdout while set (a client that fell behind).
    paused: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Agent {
    pub fn start(options: AgentOptions) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let plugin_dir = dir.path().join("plugins");
        let workdir = dir.path().join("work");
        std::fs::create_dir_all(&plugin_dir).expect("plugin dir");
        std::fs::create_dir_all(&workdir).expect("work dir");
        for plugin in &options.plugins {
            let name = plugin.file_name().expect("plugin file name");
            if options.run_as.is_some() {
                // The other user may not be able to reach the build directory: a copy.
                std::fs::copy(plugin, plugin_dir.join(name)).expect("copy plugin");
            } else {
                std::os::unix::fs::symlink(plugin, plugin_dir.join(name)).expect("link plugin");
            }
        }
        // The other user may not be able to reach the build directory: a copy of hotsh (and
        // its shim, unless the test wants it alone).
        let hotsh = if let Some(executable) = &options.executable {
            executable.clone()
        } else if options.run_as.is_some() || options.without_shim {
            let copy = dir.path().join("bin").join("hotsh");
            std::fs::create_dir_all(copy.parent().expect("bin dir")).expect("bin dir");
            std::fs::copy(hotsh_binary(), &copy).expect("copy hotsh");
            if !options.without_shim {
                std::fs::copy(shim_binary(), copy.with_file_name("hotsh-shim")).expect("copy shim");
            }
            copy
        } else {
            hotsh_binary()
        };
        let script = dir.path().join("script.json");
        let script_text = if options.per_session.is_empty() {
            json!({"responses": options.responses})
        } else {
            json!({"sessions": options.per_session})
        };
        std::fs::write(&script, script_text.to_string()).expect("script");
        let mut command = match options.soft_open_files {
            Some(limit) => {
                let mut shell = Command::new("bash");
                shell
                    .arg("-c")
                    .arg(format!("ulimit -Sn {limit} && exec \"$0\" \"$@\""))
                    .arg(&hotsh);
                shell
            }
            None => Command::new(&hotsh),
        };
        if let Some((uid, gid)) = options.run_as {
            use std::os::unix::process::CommandExt as _;
            chown_tree(dir.path(), uid, gid);
            command.uid(uid).gid(gid);
        }
        if let Some(path) = &options.inherited_file {
            use std::os::fd::AsRawFd as _;
            use std::os::unix::process::CommandExt as _;
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .expect("the inherited file opens");
            let fd = file.as_raw_fd();
            // SAFETY: dup2 is async-signal-safe; the closure owns `file` until the exec, and
            // the duplicate on 7 is not close-on-exec.
            unsafe {
                command.pre_exec(move || {
                    let _ = &file;
                    if libc::dup2(fd, 7) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        if !options.bare {
            if !options.without_acp_word {
                command.arg("acp");
            }
            match &options.model_args {
                Some(args) => {
                    command.args(args);
                }
                None => {
                    command.arg("--model").arg(format!("script:{}", script.display()));
                }
            }
            command
                .arg("--plugin-dir")
                .arg(&plugin_dir)
                .arg("--model-transcript")
                .arg(dir.path().join("transcript.jsonl"));
            for dir in &options.extra_plugin_dirs {
                // A relative one is inside the agent's working directory.
                command.arg("--plugin-dir").arg(workdir.join(dir));
            }
            if !options.default_plugins {
                command.arg("--no-default-plugins");
            }
            if let Some(record) = &options.record {
                command.arg("--record").arg(record);
            }
            if options.flags_outside_home {
                command.arg("--data-dir").arg(dir.path().join("data"));
            }
            if let Some(config) = &options.config {
                if options.home_is_workdir && !options.flags_outside_home {
                    let path = workdir.join(".config/hotsh/config.toml");
                    std::fs::create_dir_all(path.parent().expect("a parent")).expect("config dir");
                    std::fs::write(&path, config).expect("config file");
                } else {
                    let path = dir.path().join("config.toml");
                    std::fs::write(&path, config).expect("config file");
                    command.arg("--config").arg(path);
                }
            }
        }
        command
            .env("HOTSH_LOG", "debug")
            // Never the developer's own configuration, plugins or sessions.
            .env("XDG_CONFIG_HOME", dir.path().join("config-home"))
            .env("XDG_DATA_HOME", dir.path().join("data-home"))
            .env("HOTSH_DATA_DIR", dir.path().join("data"))
            .env("TMPDIR", dir.path())
            // Never the developer's model settings.
            .env_remove("HOTSH_MODEL")
            .env_remove("HOTSH_BASE_URL")
            .env_remove("HOTSH_API_KEY")
            .env_remove("DEEPSEEK_API_KEY")
            .env_remove("OPENAI_API_KEY")
            .envs(options.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        if options.home_is_workdir {
            command
                .env("HOME", &workdir)
                .env("XDG_CONFIG_HOME", workdir.join(".config"))
                .env("XDG_DATA_HOME", workdir.join(".local/share"))
                .env_remove("HOTSH_DATA_DIR");
        }
        command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = command.spawn().expect("hotsh starts");
        let stdout = child.stdout.take().expect("stdout");
        let (send, incoming) = channel();
        let paused = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let reading = std::sync::Arc::clone(&paused);
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            loop {
                while reading.load(std::sync::atomic::Ordering::Acquire) {
                    std::thread::sleep(Duration::from_millis(5));
                }
                let Some(Ok(line)) = lines.next() else { break };
                let value: Value = serde_json::from_str(&line).unwrap_or_else(|e| {
                    panic!("hotsh wrote a non-JSON line to stdout ({e}): {line}")
                });
                if send.send(value).is_err() {
                    break;
                }
            }
        });
        let stderr = std::sync::Arc::new(Mutex::new(String::new()));
        let stderr_pipe = child.stderr.take().expect("stderr");
        let log = std::sync::Arc::clone(&stderr);
        if options.stderr_closed {
            drop(stderr_pipe);
        } else {
            std::thread::spawn(move || {
                for line in BufReader::new(stderr_pipe).lines() {
                    let Ok(line) = line else { break };
                    let mut log = log.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    log.push_str(&line);
                    log.push('\n');
                }
            });
        }
        let stdin = child.stdin.take();
        let home_is_workdir = options.home_is_workdir;
        Self {
            child,
            stdin,
            incoming,
            paused,
            received: Vec::new(),
            next_id: 1,
            dir,
            workdir,
            stderr,
            home_is_workdir,
        }
    }

    /// The agent's data directory (its session logs are in `sessions/`).
    pub fn data_dir(&self) -> PathBuf {
        if self.home_is_workdir {
            return self.workdir.join(".local/share/hotsh");
        }
        self.dir.path().join("data")
    }

    /// The directory the agent loads plugins from (and watches).
    pub fn plugin_dir(&self) -> PathBuf {
        self.dir.path().join("plugins")
    }

    /// The plugin cards (reloads, rejections, unloads) sent to `session` so far:
    /// (title, status, text).
    pub fn plugin_cards(&self, session: &str) -> Vec<(String, String, String)> {
        self.updates(session)
            .iter()
            .filter(|u| u["sessionUpdate"] == "tool_call" && is_plugin_card(u))
            .map(|u| {
                (
                    u["title"].as_str().unwrap_or_default().to_owned(),
                    u["status"].as_str().unwrap_or_default().to_owned(),
                    u["content"][0]["content"]["text"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    }

    /// Waits for a plugin card sent to `session` whose title contains `needle`, received
    /// after message number `after`; returns (title, status, text) and its message number.
    pub fn wait_for_plugin_card(
        &mut self,
        session: &str,
        after: usize,
        needle: &str,
    ) -> ((String, String, String), usize) {
        let at = self.wait_for_from(after, |m| {
            let u = &m["params"]["update"];
            m["params"]["sessionId"] == session
                && u["sessionUpdate"] == "tool_call"
                && is_plugin_card(u)
                && u["title"].as_str().is_some_and(|t| t.contains(needle))
        });
        let u = &self.received[at]["params"]["update"];
        let card = (
            u["title"].as_str().unwrap_or_default().to_owned(),
            u["status"].as_str().unwrap_or_default().to_owned(),
            u["content"][0]["content"]["text"].as_str().unwrap_or_default().to_owned(),
        );
        (card, at + 1)
    }

    /// Waits until hotsh has written `needle` to stderr (read on a thread of its own, so a
    /// line written before an answer may arrive after it); returns all of stderr.
    pub fn wait_for_stderr(&self, needle: &str) -> String {
        eventually(&format!("{needle:?} on hotsh's stderr"), || self.stderr().contains(needle));
        self.stderr()
    }

    /// Everything hotsh wrote to stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Writes raw bytes to hotsh's stdin.
    /// Stops reading hotsh's stdout (after the line being read), as a client that fell behind
    /// or hung would; hotsh's writes then block once the pipe is full.
    pub fn stop_reading(&self) {
        self.paused.store(true, std::sync::atomic::Ordering::Release);
    }

    pub fn resume_reading(&self) {
        self.paused.store(false, std::sync::atomic::Ordering::Release);
    }

    pub fn send_bytes(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(bytes).expect("write to hotsh");
        stdin.flush().expect("flush to hotsh");
    }

    pub fn send_line(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(line.as_bytes()).expect("write to hotsh");
        stdin.write_all(b"\n").expect("write to hotsh");
        stdin.flush().expect("flush to hotsh");
    }

    /// Sends a request and returns its id.
    pub fn request(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send_line(
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string(),
        );
        id
    }

    pub fn notify(&mut self, method: &str, params: Value) {
        self.send_line(&json!({"jsonrpc": "2.0", "method": method, "params": params}).to_string());
    }

    /// Waits for the next message that satisfies `matches` (already received ones first, in
    /// order, from `from` on) and returns its index in `received`.
    pub fn wait_for_from(&mut self, from: usize, mut matches: impl FnMut(&Value) -> bool) -> usize {
        if let Some(index) = self.received.iter().skip(from).position(&mut matches) {
            return from + index;
        }
        let started = Instant::now();
        loop {
            let left = DEADLINE.saturating_sub(started.elapsed());
            match self.incoming.recv_timeout(left) {
                Ok(value) => {
                    self.received.push(value);
                    if matches(self.received.last().expect("just pushed")) {
                        return self.received.len() - 1;
                    }
                }
                Err(RecvTimeoutError::Timeout) => panic!(
                    "no matching message within {DEADLINE:?}; received: {:#?}\nstderr:\n{}",
                    self.received,
                    self.stderr()
                ),
                Err(RecvTimeoutError::Disconnected) => panic!(
                    "hotsh closed stdout; received: {:#?}\nstderr:\n{}",
                    self.received,
                    self.stderr()
                ),
            }
        }
    }

    pub fn wait_for(&mut self, matches: impl FnMut(&Value) -> bool) -> Value {
        let index = self.wait_for_from(0, matches);
        self.received[index].clone()
    }

    /// Waits for terminal output (Zed's `terminal_output`) containing `needle`.
    pub fn wait_for_terminal_output(&mut self, needle: &str) -> Value {
        self.wait_for(|m| {
            m["params"]["update"]["_meta"]["terminal_output"]["data"]
                .as_str()
                .is_some_and(|d| d.contains(needle))
        })
    }

    /// Answers a request the agent sent (`request`) with `reply`'s `result` or `error`.
    pub fn answer(&mut self, request: &Value, reply: Value) {
        let mut answer = json!({"jsonrpc": "2.0", "id": request["id"]});
        if let (Some(answer), Some(reply)) = (answer.as_object_mut(), reply.as_object()) {
            answer.extend(reply.clone());
        }
        self.send_line(&answer.to_string());
    }

    /// Sends a prompt, answers the `session/request_permission` it leads to with `reply` (a
    /// JSON-RPC `result` or `error` member), waits for the prompt's answer, and returns the
    /// permission request.
    pub fn prompt_answering_permission(&mut self, session: &str, reply: Value) -> Value {
        let before = self.received.len();
        let prompt = self.start_prompt(session, "go");
        let at = self.wait_for_from(before, |m| m["method"] == "session/request_permission");
        let request = self.received[at].clone();
        self.answer(&request, reply);
        self.response(prompt);
        request
    }

    /// Waits for the response to request `id`.
    pub fn response(&mut self, id: u64) -> Value {
        self.wait_for(|m| m.get("id") == Some(&json!(id)) && m.get("method").is_none())
    }

    pub fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.request(method, params);
        self.response(id)
    }

    /// `initialize`, advertising Zed's terminal support or not.
    pub fn initialize(&mut self, terminal_output: bool) -> Value {
        let capabilities =
            if terminal_output { json!({"_meta": {"terminal_output": true}}) } else { json!({}) };
        self.initialize_with(capabilities)
    }

    /// `initialize` with these client capabilities.
    pub fn initialize_with(&mut self, capabilities: Value) -> Value {
        let response = self
            .call("initialize", json!({"protocolVersion": 1, "clientCapabilities": capabilities}));
        assert!(response.get("result").is_some(), "initialize failed: {response}");
        response
    }

    pub fn new_session(&mut self) -> String {
        // Plugins load in the background: a test that changes plugin files after this point
        // must not race the initial scan.
        self.wait_for_stderr("initial plugin scan done");
        let cwd = self.workdir.to_string_lossy().into_owned();
        let response = self.call("session/new", json!({"cwd": cwd, "mcpServers": []}));
        response["result"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("session/new failed: {response}"))
            .to_owned()
    }

    pub fn start_prompt(&mut self, session: &str, text: &str) -> u64 {
        self.request(
            "session/prompt",
            json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]}),
        )
    }

    /// Sends a prompt and waits for its answer.
    pub fn prompt(&mut self, session: &str, text: &str) -> Value {
        let id = self.start_prompt(session, text);
        self.response(id)
    }

    /// The final update (`tool_call_update` with status `completed` or `failed`) of every
    /// call of `session` so far, in order.
    pub fn final_updates(&self, session: &str) -> Vec<Value> {
        self.updates(session)
            .into_iter()
            .filter(|u| {
                u["sessionUpdate"] == "tool_call_update"
                    && matches!(u["status"].as_str(), Some("completed" | "failed"))
            })
            .collect()
    }

    /// Sends `session/load` for `session` (begun in `cwd`) and waits for its answer: the
    /// `session/update` payloads of that session that came before the answer, and the answer.
    pub fn load(&mut self, session: &str, cwd: &Path) -> (Vec<Value>, Value) {
        let before = self.received.len();
        let id = self
            .request("session/load", json!({"sessionId": session, "cwd": cwd, "mcpServers": []}));
        let at = self.wait_for_from(before, |m| m["id"] == id && m.get("method").is_none());
        let updates = self.received[before..at]
            .iter()
            .filter(|m| m["method"] == "session/update" && m["params"]["sessionId"] == session)
            .map(|m| m["params"]["update"].clone())
            .collect();
        (updates, self.received[at].clone())
    }

    /// The `session/update` payloads of `session`'s thread received so far: everything but
    /// what describes the session's state (context use, the slash commands, the title; see
    /// [`Agent::all_updates`]).
    pub fn updates(&self, session: &str) -> Vec<Value> {
        self.all_updates(session).into_iter().filter(|u| !is_state_update(u)).collect()
    }

    /// Every `session/update` payload received so far for `session`.
    pub fn all_updates(&self, session: &str) -> Vec<Value> {
        self.received
            .iter()
            .filter(|m| m["method"] == "session/update" && m["params"]["sessionId"] == session)
            .map(|m| m["params"]["update"].clone())
            .collect()
    }

    /// Every model request so far, as the model saw it.
    pub fn model_requests(&self) -> Vec<Value> {
        let path = self.dir.path().join("transcript.jsonl");
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).expect("transcript line is JSON"))
            .collect()
    }

    /// The tool results the model received, in order: (text, is_error).
    pub fn tool_results(&self) -> Vec<(String, bool)> {
        let requests = self.model_requests();
        let Some(last) = requests.last() else {
            return Vec::new();
        };
        last["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .filter(|m| m["role"] == "tool")
            .map(|m| {
                (
                    m["text"].as_str().expect("text").to_owned(),
                    m["is_error"].as_bool().expect("is_error"),
                )
            })
            .collect()
    }

    /// Kills hotsh with SIGKILL (no chance to clean up) and reaps it.
    pub fn kill9(&mut self) {
        self.child.kill().expect("SIGKILL hotsh");
        self.child.wait().expect("reap hotsh");
    }

    /// Peak resident memory of hotsh so far (VmHWM), in KiB.
    pub fn peak_rss_kib(&self) -> u64 {
        self.proc_status_kib("VmHWM")
    }

    /// Resident memory of hotsh now (VmRSS), in KiB.
    pub fn rss_kib(&self) -> u64 {
        self.proc_status_kib("VmRSS")
    }

    fn proc_status_kib(&self, field: &str) -> u64 {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.pid())).expect("proc status");
        status
            .lines()
            .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("{field} in /proc/{}/status", self.pid()))
    }

    /// The text of the tool result the model received last.
    pub fn last_tool_result(&self) -> (String, bool) {
        self.tool_results().pop().expect("a tool result")
    }

    /// Closes stdin and waits for hotsh to exit; returns its exit status.
    pub fn finish(mut self) -> std::process::ExitStatus {
        drop(self.stdin.take());
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for hotsh") {
                return status;
            }
            assert!(started.elapsed() < DEADLINE, "hotsh did not exit after stdin closed");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Hands `dir` and everything in it to `uid`:`gid` (via chown(1), following no links).
pub fn chown_tree(dir: &Path, uid: u32, gid: u32) {
    let status = Command::new("chown")
        .arg("-R")
        .arg("-h")
        .arg(format!("{uid}:{gid}"))
        .arg(dir)
        .status()
        .expect("chown runs");
    assert!(status.success(), "chown of {} failed", dir.display());
}

/// Whether the tests run as root (some tests need to become another user).
pub fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// A plugin card: a tool call the host sends on its own when a plugin changes.
fn is_plugin_card(update: &Value) -> bool {
    update["title"].as_str().is_some_and(|t| t.starts_with("Plugin "))
}

/// The agent's private copies of plugin builds (memory files it keeps open): each one's name,
/// size and the bytes it holds in memory.
pub fn private_copies(pid: u32) -> Vec<(String, u64, u64)> {
    use std::os::unix::fs::MetadataExt as _;
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).expect("the agent's descriptors");
    fds.filter_map(|fd| {
        let path = fd.ok()?.path();
        let target = std::fs::read_link(&path).ok()?.to_string_lossy().into_owned();
        let name = target.strip_prefix("/memfd:hotsh-")?.trim_end_matches(" (deleted)").to_owned();
        let meta = std::fs::metadata(&path).ok()?;
        Some((name, meta.size(), meta.blocks() * 512))
    })
    .collect()
}

/// Pids of live processes whose command line contains `needle`.
pub fn processes_matching(needle: &str) -> Vec<u32> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        // Zombies have an empty cmdline and are not running.
        if cmdline.contains(needle) {
            found.push(pid);
        }
    }
    found
}

/// Waits until the file at `path` contains `needle`.
pub fn wait_for_file_containing(path: &Path, needle: &str) {
    eventually(&format!("{} to contain {needle:?}", path.display()), || {
        std::fs::read_to_string(path).is_ok_and(|text| text.contains(needle))
    });
}

/// Polls `condition` every 10 ms until it holds or `DEADLINE` passes.
pub fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    let started = Instant::now();
    while !condition() {
        assert!(started.elapsed() < DEADLINE, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Tool-call updates for `call_id` in order.
pub fn card_updates<'a>(updates: &'a [Value], call_id: &str) -> Vec<&'a Value> {
    updates.iter().filter(|u| u["toolCallId"] == call_id).collect()
}

/// Counts of each `sessionUpdate` kind, for readable assertions.
pub fn update_kinds(updates: &[Value]) -> HashMap<String, usize> {
    let mut kinds = HashMap::new();
    for update in updates {
        *kinds.entry(update["sessionUpdate"].as_str().unwrap_or("?").to_owned()).or_insert(0) += 1;
    }
    kinds
}

/// What the fake model provider answers to one request.
#[derive(Debug, Clone)]
pub enum Reply {
    /// `200` with `text/event-stream`: each piece is written (and flushed) on its own, so
    /// lines can be split across TCP writes the way providers split them.
    Stream(Vec<String>),
    /// An error status with a body (and extra headers, e.g. `Retry-After`).
    Status { code: u16, headers: Vec<(String, String)>, body: String },
    /// Writes the pieces, then waits until the client closes the connection (and notes it).
    Hang(Vec<String>),
    /// `200` with `text/event-stream`, writing each piece as it comes from the channel (the
    /// benchmark paces a stream this way), until an empty piece or the channel closes.
    Paced(std::sync::Arc<Mutex<std::sync::mpsc::Receiver<String>>>),
}

impl Reply {
    /// A streamed answer of plain text, finished.
    pub fn text(text: &str) -> Reply {
        Reply::Stream(vec![
            delta(json!({"role": "assistant", "content": text}), None),
            delta(json!({}), Some("stop")),
            "data: [DONE]\n\n".into(),
        ])
    }

    /// A streamed answer calling `calls` (name, arguments), each with the id `call_N`.
    pub fn calls(calls: &[(&str, Value)]) -> Reply {
        let fragments: Vec<Value> = calls
            .iter()
            .enumerate()
            .map(|(index, (name, arguments))| {
                json!({"index": index, "id": format!("call_{index}"), "type": "function",
                       "function": {"name": name, "arguments": arguments.to_string()}})
            })
            .collect();
        Reply::Stream(vec![
            delta(json!({"role": "assistant", "tool_calls": fragments}), None),
            delta(json!({}), Some("tool_calls")),
            "data: [DONE]\n\n".into(),
        ])
    }
}

/// One request the fake provider received.
#[derive(Debug, Clone)]
pub struct Received {
    pub method: String,
    pub path: String,
    /// Header names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: Value,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// Whether a `session/update` payload describes the session's state rather than adding to
/// its thread: context use, the slash commands, the title.
pub fn is_state_update(update: &Value) -> bool {
    matches!(
        update["sessionUpdate"].as_str(),
        Some("usage_update" | "available_commands_update" | "session_info_update")
    )
}

/// A model provider on loopback speaking the OpenAI chat completions protocol: it answers
/// each request with the next scripted reply and records what it received.
#[allow(missing_debug_implementations, reason = "holds a thread")]
pub struct FakeProvider {
    /// The base URL to give hotsh (`http://127.0.0.1:PORT/v1`).
    pub base_url: String,
    received: std::sync::Arc<Mutex<Vec<Received>>>,
    closed: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    /// When each request's connection came, and when its reply was written.
    timeline: std::sync::Arc<Mutex<Vec<(std::time::Instant, std::time::Instant)>>>,
    /// Refuses histories with unanswered tool calls ([`FakeProvider::strict`]).
    strict: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

/// The ids of tool calls in `body`'s messages that no `tool` message right after their
/// assistant message answers, comma separated; `None` when every call is answered.
pub fn unanswered_tool_calls(body: &Value) -> Option<String> {
    let messages = body["messages"].as_array()?;
    let mut missing = Vec::new();
    for (at, message) in messages.iter().enumerate() {
        let Some(calls) = message["tool_calls"].as_array() else { continue };
        let mut ids: Vec<&str> = calls.iter().filter_map(|c| c["id"].as_str()).collect();
        for answer in messages[at + 1..].iter().take_while(|m| m["role"] == "tool") {
            ids.retain(|id| answer["tool_call_id"] != *id);
        }
        missing.extend(ids);
    }
    (!missing.is_empty()).then(|| missing.join(", "))
}

impl FakeProvider {
    pub fn start(replies: Vec<Reply>) -> Self {
        Self::start_with(replies, true)
    }

    /// A provider that, as OpenAI and DeepSeek do, answers 400 (taking no scripted reply) to
    /// a request whose history has an assistant message with a tool call no tool message
    /// answers right after it.
    pub fn strict(replies: Vec<Reply>) -> Self {
        let provider = Self::start_with(replies, true);
        provider.strict.store(true, std::sync::atomic::Ordering::SeqCst);
        provider
    }

    /// A provider that does not parse what it receives (its `body` is `null`): a benchmark's,
    /// whose own work must not grow with the requests.
    pub fn start_unparsed(replies: Vec<Reply>) -> Self {
        Self::start_with(replies, false)
    }

    fn start_with(replies: Vec<Reply>, parse: bool) -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let base_url = format!("http://{}/v1", listener.local_addr().expect("address"));
        let received = std::sync::Arc::new(Mutex::new(Vec::new()));
        let closed = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (log, hung_up) = (std::sync::Arc::clone(&received), std::sync::Arc::clone(&closed));
        let timeline = std::sync::Arc::new(Mutex::new(Vec::new()));
        let times = std::sync::Arc::clone(&timeline);
        let strict = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let checks = std::sync::Arc::clone(&strict);
        std::thread::spawn(move || {
            let mut replies = replies.into_iter();
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let came = std::time::Instant::now();
                let Some(request) = read_request(&mut stream, parse) else { continue };
                let unanswered = checks
                    .load(std::sync::atomic::Ordering::SeqCst)
                    .then(|| unanswered_tool_calls(&request.body))
                    .flatten();
                log.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(request);
                if let Some(ids) = unanswered {
                    let message = format!(
                        "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: {ids}"
                    );
                    let body =
                        json!({"error": {"message": message, "type": "invalid_request_error"}});
                    let reply =
                        Reply::Status { code: 400, headers: Vec::new(), body: body.to_string() };
                    serve(&mut stream, reply);
                    continue;
                }
                let reply = replies.next().unwrap_or(Reply::Status {
                    code: 500,
                    headers: Vec::new(),
                    body: "{\"error\":{\"message\":\"the fake provider has no more replies\"}}"
                        .into(),
                });
                if serve(&mut stream, reply) {
                    hung_up.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
                times
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push((came, std::time::Instant::now()));
            }
        });
        Self { base_url, received, closed, timeline, strict }
    }

    /// The requests received so far.
    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// For each request so far: when its connection came and when its reply was written.
    pub fn timeline(&self) -> Vec<(std::time::Instant, std::time::Instant)> {
        self.timeline.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// How many `Hang` replies saw their client close the connection.
    pub fn hung_up(&self) -> usize {
        self.closed.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// Reads one HTTP/1.1 request (headers, then a `Content-Length` body).
pub fn read_request(stream: &mut std::net::TcpStream, parse: bool) -> Option<Received> {
    use std::io::Read as _;
    let mut bytes = Vec::new();
    let mut buffer = [0u8; 8192];
    let header_end = loop {
        let n = stream.read(&mut buffer).ok()?;
        if n == 0 {
            return None;
        }
        bytes.extend_from_slice(&buffer[..n]);
        if let Some(at) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
    };
    let head = String::from_utf8_lossy(&bytes[..header_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next()?.split_whitespace();
    let method = request_line.next()?.to_owned();
    let path = request_line.next()?.to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    // The body is read straight into place, as a server reads a large request: a long
    // session's request is megabytes, and 8 KiB reads would time this server, not hotsh. Into
    // the buffer this thread read the last one into, only ever grown: a new one for each
    // request would time the zeroing and the page faults of megabytes.
    thread_local! {
        static BODY: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    BODY.with_borrow_mut(|buffer| {
        if buffer.len() < length {
            buffer.resize(length, 0);
        }
        let body = &mut buffer[..length];
        let have = bytes.len().min(header_end + length) - header_end;
        body[..have].copy_from_slice(&bytes[header_end..header_end + have]);
        let mut filled = have;
        while filled < length {
            match stream.read(&mut body[filled..]) {
                Ok(0) | Err(_) => break,
                Ok(n) => filled += n,
            }
        }
        let body = if parse {
            serde_json::from_slice(&body[..filled]).unwrap_or(Value::Null)
        } else {
            Value::Null
        };
        Some(Received { method, path, headers, body })
    })
}

/// Answers one request; true when a `Hang` saw the client close the connection.
fn serve(stream: &mut std::net::TcpStream, reply: Reply) -> bool {
    use std::io::Read as _;
    match reply {
        Reply::Status { code, headers, body } => {
            let mut head = format!(
                "HTTP/1.1 {code} Error\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
                body.len()
            );
            for (name, value) in headers {
                head.push_str(&format!("{name}: {value}\r\n"));
            }
            head.push_str("\r\n");
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(body.as_bytes());
            false
        }
        Reply::Stream(pieces) | Reply::Hang(pieces) if pieces.is_empty() => false,
        Reply::Stream(pieces) => {
            let _ = stream.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n",
            );
            for piece in pieces {
                if stream.write_all(piece.as_bytes()).and_then(|()| stream.flush()).is_err() {
                    break;
                }
            }
            false
        }
        Reply::Paced(pieces) => {
            let _ = stream.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n",
            );
            let pieces = pieces.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            while let Ok(piece) = pieces.recv() {
                if piece.is_empty()
                    || stream.write_all(piece.as_bytes()).and_then(|()| stream.flush()).is_err()
                {
                    break;
                }
            }
            false
        }
        Reply::Hang(pieces) => {
            let _ = stream.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n",
            );
            for piece in pieces {
                let _ = stream.write_all(piece.as_bytes()).and_then(|()| stream.flush());
            }
            // The client closes the connection when it gives up the stream.
            let mut rest = [0u8; 256];
            let _ = stream.set_read_timeout(Some(DEADLINE));
            matches!(stream.read(&mut rest), Ok(0))
        }
    }
}

/// A server-sent event carrying `data` (one `data:` line and the blank line after it).
pub fn sse(data: &Value) -> String {
    format!("data: {data}\n\n")
}

/// A streamed chunk whose first choice has this `delta` (and optionally a finish reason).
pub fn delta(delta: Value, finish: Option<&str>) -> String {
    sse(
        &json!({"id": "x", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}),
    )
}

/// Every `session/update` the agent sent so far parses as the ACP SDK's
/// `SessionNotification` (with its unstable subagent types), and a `subagent_update` reads back
/// exactly as sent (the SDK drops a malformed field silently rather than fail).
pub fn assert_updates_are_acp(agent: &Agent) {
    use agent_client_protocol::v1::schema::SessionNotification;
    for message in agent.received.iter().filter(|m| m["method"] == "session/update") {
        let params = &message["params"];
        let parsed: SessionNotification = serde_json::from_value(params.clone())
            .unwrap_or_else(|error| panic!("not an ACP session/update ({error}): {params}"));
        if params["update"]["sessionUpdate"] == "subagent_update" {
            let again = serde_json::to_value(&parsed).expect("serialises");
            assert_eq!(&again, params, "a subagent_update lost something in the SDK's types");
        }
    }
}
