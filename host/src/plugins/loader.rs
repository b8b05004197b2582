//! Loading one plugin file as a new generation (DESIGN §5's verified recipe).
//!
//! The file is read once, checked, and byte-copied to a name unique to this process and
//! generation: the dynamic loader caches libraries by name and inode, so loading the original
//! path (or a hard link) again would hand back the old code. The copy is loaded with
//! `RawLibrary`, its layout is checked against the host's, and the library is never unloaded
//! (pointers into it live on in the registry). `RootModule::load_from*` is never used: it
//! caches the first module per process.

use super::v1::PluginV1;
use crate::model::ToolDefinition;
use abi_stable::library::{LibraryError, RawLibrary, RootModuleError, lib_header_from_raw_library};
use hotsh_abi::PluginModuleRef;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The number of a load, unique within the process; higher is newer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Generation(pub(crate) u64);

impl std::fmt::Display for Generation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "g{}", self.0)
    }
}

static NEXT_GENERATION: AtomicU64 = AtomicU64::new(1);

/// A prompt section a plugin contributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PromptSection {
    pub(crate) id: String,
    pub(crate) order: u32,
    pub(crate) text: String,
}

/// One loaded build of one plugin.
#[derive(Debug)]
pub(crate) struct LoadedPlugin {
    pub(crate) generation: Generation,
    /// The file it was loaded from (not the private copy).
    pub(crate) path: PathBuf,
    pub(crate) name: String,
    pub(crate) version: String,
    pub(crate) content_hash: u64,
    /// The hotsh-abi version the plugin was built against.
    pub(crate) abi_version: String,
    pub(crate) tools: Vec<ToolDefinition>,
    pub(crate) prompt_sections: Vec<PromptSection>,
    pub(crate) api: PluginV1,
}

/// Why a file was not loaded. Each reason is short enough to show a user.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Rejection {
    #[error("cannot read {path}: {source}")]
    Unreadable {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("not a complete ELF shared library (still being written, or truncated)")]
    Incomplete,
    #[error("not a hotsh plugin (no abi_stable root module)")]
    NotAPlugin,
    #[error("the dynamic loader refused it: {0}")]
    Open(String),
    #[error(
        "built against another hotsh-abi version (plugin {found}, host {expected}); rebuild it against hotsh-abi {expected}"
    )]
    Version { expected: String, found: String },
    #[error("its interface does not match this host's (rebuild it against this hotsh-abi):\n{0}")]
    Layout(String),
    #[error("its module constructor panicked")]
    ConstructorPanicked,
    #[error("{0}")]
    Plugin(String),
}

/// Loads `path` as a new generation. `scratch` is where the private copy is written (it is
/// removed again once loaded).
pub(crate) fn load(path: &Path, scratch: &Path) -> Result<LoadedPlugin, Rejection> {
    let bytes = std::fs::read(path).map_err(|source| Rejection::Unreadable {
        path: path.to_owned(),
        source,
    })?;
    load_bytes(path, &bytes, scratch)
}

pub(crate) fn load_bytes(
    path: &Path,
    bytes: &[u8],
    scratch: &Path,
) -> Result<LoadedPlugin, Rejection> {
    if !is_complete_elf(bytes) {
        return Err(Rejection::Incomplete);
    }
    // Cheap pre-check that spares loading (and running the initialisers of) libraries that
    // cannot be plugins.
    let marker = abi_stable::library::ROOT_MODULE_LOADER_NAME.as_bytes();
    if !bytes.windows(marker.len()).any(|window| window == marker) {
        return Err(Rejection::NotAPlugin);
    }
    let generation = Generation(NEXT_GENERATION.fetch_add(1, Ordering::Relaxed));
    let stem = path
        .file_stem()
        .map_or_else(|| "plugin".into(), |s| s.to_string_lossy());
    let copy = scratch.join(format!("{stem}.{}.{generation}.so", std::process::id()));
    std::fs::create_dir_all(scratch)
        .and_then(|()| std::fs::write(&copy, bytes))
        .map_err(|e| {
            Rejection::Open(format!("cannot write private copy {}: {e}", copy.display()))
        })?;
    let library = RawLibrary::load_at(&copy);
    // The mapping stays valid after the name is gone; nothing is left behind even if the host
    // is killed later.
    let _ = std::fs::remove_file(&copy);
    let library = library.map_err(|e| Rejection::Open(first_line(&e.to_string())))?;
    // SAFETY: the library is never unloaded (forgotten below), so the header's 'static
    // references stay valid.
    let mut abi_version = String::new();
    let module = unsafe { lib_header_from_raw_library(&library) }.and_then(|header| {
        // Copied out at once: the string lives in the library.
        abi_version = header.version_strings().version.as_str().to_owned();
        header.init_root_module::<PluginModuleRef>()
    });
    // Never unload, even on failure: an error value may still point into the library.
    std::mem::forget(library);
    let module = module.map_err(reject)?;
    let api = PluginV1::new(module);
    let manifest = api.manifest().map_err(Rejection::Plugin)?;
    let tools = api.tools().map_err(Rejection::Plugin)?;
    let prompt_sections = api.prompt_sections().map_err(Rejection::Plugin)?;
    Ok(LoadedPlugin {
        generation,
        path: path.to_owned(),
        name: manifest.0,
        version: manifest.1,
        content_hash: content_hash(bytes),
        abi_version,
        tools,
        prompt_sections,
        api,
    })
}

fn reject(error: LibraryError) -> Rejection {
    match error {
        LibraryError::GetSymbolError { .. } | LibraryError::InvalidAbiHeader(_) => {
            Rejection::NotAPlugin
        }
        LibraryError::IncompatibleVersionNumber {
            expected_version,
            actual_version,
            ..
        } => Rejection::Version {
            expected: expected_version.to_string(),
            found: actual_version.to_string(),
        },
        LibraryError::AbiInstability(details) => {
            Rejection::Layout(layout_summary(&details.to_string()))
        }
        LibraryError::RootModule {
            err: RootModuleError::Unwound,
            ..
        } => Rejection::ConstructorPanicked,
        other => Rejection::Open(first_line(&other.to_string())),
    }
}

/// The few lines of abi_stable's layout report (often hundreds of lines) that say what
/// differs: each `Error:` line with its `Expected:` and `Found:` lines.
pub(crate) fn layout_summary(report: &str) -> String {
    const KEYS: [&str; 3] = ["Error:", "Expected:", "Found:"];
    let lines: Vec<&str> = report.lines().collect();
    let mut summary = Vec::new();
    for (index, line) in lines.iter().enumerate() {
        let trimmed = line.trim();
        if KEYS.iter().any(|key| trimmed.starts_with(key)) {
            summary.push(trimmed.to_owned());
            // abi_stable puts the value on the following line when it is long.
            if let Some(next) = lines.get(index + 1) {
                let next = next.trim();
                if !next.is_empty() && !KEYS.iter().any(|key| next.starts_with(key)) {
                    summary.push(format!("    {next}"));
                }
            }
        }
        if summary.len() >= 12 {
            break;
        }
    }
    if summary.is_empty() {
        return first_line(report);
    }
    summary.join("\n")
}

fn first_line(text: &str) -> String {
    text.lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or(text)
        .trim()
        .to_owned()
}

/// True when `bytes` is a 64-bit little-endian ELF whose section header table (written last
/// by the linker) lies entirely within the file.
pub(crate) fn is_complete_elf(bytes: &[u8]) -> bool {
    const HEADER_LEN: usize = 64;
    if bytes.len() < HEADER_LEN || &bytes[..4] != b"\x7fELF" || bytes[4] != 2 || bytes[5] != 1 {
        return false;
    }
    let u16_at = |at: usize| u64::from(u16::from_le_bytes([bytes[at], bytes[at + 1]]));
    let mut shoff = [0u8; 8];
    shoff.copy_from_slice(&bytes[0x28..0x30]);
    let section_headers_at = u64::from_le_bytes(shoff);
    let section_headers_len = u16_at(0x3A) * u16_at(0x3C);
    section_headers_at
        .checked_add(section_headers_len)
        .is_some_and(|end| end > 0 && end <= bytes.len() as u64)
}

/// Identifies a build by content (SipHash; collisions are not a security concern here, a
/// changed build only needs to look changed).
pub(crate) fn content_hash(bytes: &[u8]) -> u64 {
    use std::hash::{DefaultHasher, Hasher};
    let mut hasher = DefaultHasher::new();
    hasher.write(bytes);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncated_elf_is_incomplete() {
        let mut elf = vec![0u8; 200];
        elf[..6].copy_from_slice(b"\x7fELF\x02\x01");
        elf[0x28..0x30].copy_from_slice(&100u64.to_le_bytes());
        elf[0x3A..0x3C].copy_from_slice(&64u16.to_le_bytes());
        elf[0x3C..0x3E].copy_from_slice(&1u16.to_le_bytes());
        assert!(is_complete_elf(&elf));
        assert!(!is_complete_elf(&elf[..150]));
        assert!(!is_complete_elf(
            b"not an elf file at all, not even close to one......................"
        ));
    }

    #[test]
    fn layout_summary_keeps_error_expected_found() {
        let report = "lots of context\n  Error: a field changed\n  Expected:\n    u32\n  Found:\n    u64\nmore context\n";
        assert_eq!(
            layout_summary(report),
            "Error: a field changed\nExpected:\n    u32\nFound:\n    u64"
        );
    }
}
