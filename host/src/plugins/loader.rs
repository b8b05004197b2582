//! Loading one plugin file as a new generation (DESIGN §5's verified recipe).
//!
//! The file is read once, checked, and its bytes are copied into an anonymous memory file
//! (`memfd_create`) that is loaded through `/proc/self/fd/N`. The dynamic loader caches
//! libraries by name and by inode, so loading the original path (or a hard link, or a reused
//! name) again would hand back the old code; every memory file is a new inode, and its
//! descriptor stays open for the life of the process, so no two generations share a name. No
//! other user can reach a memory file, nothing is written to a shared directory, and nothing
//! is left behind if the host is killed. The copy is loaded with `RawLibrary`, its layout is
//! checked against the host's, and the library is never unloaded (pointers into it live on in
//! the registry). `RootModule::load_from*` is never used: it caches the first module per
//! process.

use super::v1::PluginV1;
use crate::model::ToolDefinition;
use abi_stable::library::{
    LibHeader, LibraryError, RawLibrary, RootModuleError, lib_header_from_raw_library,
};
use hotsh_abi::ToolsContext;
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

use crate::prompt::PromptSection;

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
    pub(crate) loaded_at: std::time::SystemTime,
    /// From the file's bytes in memory to a checked, initialised module.
    pub(crate) load_took: std::time::Duration,
    pub(crate) tools: Vec<ToolDefinition>,
    pub(crate) prompt_sections: Vec<PromptSection>,
    /// The hooks it declares (hotsh-abi 1.1; none from a 1.0 plugin): event and matcher.
    pub(crate) hooks: Vec<(String, String)>,
    pub(crate) api: PluginV1,
}

/// Why a file was not loaded. Each reason is short enough to show a user.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Rejection {
    #[error("cannot read {path}: {source}")]
    Unreadable { path: PathBuf, source: std::io::Error },
    #[error("not a complete ELF shared library (still being written, or truncated)")]
    Incomplete,
    #[error("not a hotsh plugin (no abi_stable root module)")]
    NotAPlugin,
    #[error("the dynamic loader refused it: {0}")]
    Open(String),
    #[error("{}", version_mismatch(expected, found))]
    Version { expected: String, found: String },
    #[error("its interface does not match this host's (rebuild it against this hotsh-abi):\n{0}")]
    Layout(String),
    #[error("its module constructor panicked")]
    ConstructorPanicked,
    /// What the check in a child process found (see `check.rs`).
    #[error("{0}")]
    Checked(String),
    #[error("loading it in the agent did not finish within {} s", LOAD_TIMEOUT.as_secs())]
    Hung,
    #[error("{0}")]
    Plugin(String),
    /// The process that checks a build could not be confined, so nothing of it was run.
    #[error("the check could not be confined, so the build was not loaded: {0}")]
    Unconfined(String),
}

/// What a plugin built against hotsh-abi `found` is told by a host speaking `expected`: which
/// side is newer, and what to do.
fn version_mismatch(expected: &str, found: &str) -> String {
    let wanted = match version_number(expected).as_slice() {
        [0, minor, ..] => format!("hotsh-abi 0.{minor}"),
        [major, ..] => format!("hotsh-abi {major} (any {major}.x)"),
        [] => format!("hotsh-abi {expected}"),
    };
    if version_number(found) > version_number(expected) {
        format!(
            "built against another hotsh-abi version (plugin {found}, host {expected}): the plugin \
             speaks a newer interface than this hotsh; update hotsh, or build the plugin against \
             {wanted}"
        )
    } else {
        format!(
            "built against another hotsh-abi version (plugin {found}, host {expected}): the plugin \
             speaks an older interface than this hotsh; rebuild it against {wanted}"
        )
    }
}

/// The major version of the interface `plugins/v1.rs` adapts.
const V1: u32 = 1;

/// Whether this hotsh loads a build made against hotsh-abi `version`: one of the major
/// versions [`adapter`] has an adapter for (1: any 1.x, older or newer than this hotsh's).
pub(crate) fn speaks(version: &str) -> bool {
    version_number(version).first() == Some(&u64::from(V1))
}

/// `major.minor.patch` as numbers, to compare (a part that is not a number counts as 0).
fn version_number(version: &str) -> Vec<u64> {
    version.split('.').map(|part| part.parse().unwrap_or(0)).collect()
}

/// How long loading a build into the agent may take (after the check in a child passed).
pub(crate) const LOAD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Cheap checks that need no loading: a complete ELF file that names abi_stable's root module.
/// They spare loading (and running the initialisers of) libraries that cannot be plugins.
pub(crate) fn precheck(bytes: &[u8]) -> Result<(), Rejection> {
    if !is_complete_elf(bytes) {
        return Err(Rejection::Incomplete);
    }
    let marker = abi_stable::library::ROOT_MODULE_LOADER_NAME.as_bytes();
    let first = marker[0];
    let found = bytes
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == first)
        .any(|(at, _)| bytes[at..].starts_with(marker));
    if !found {
        return Err(Rejection::NotAPlugin);
    }
    Ok(())
}

/// Loads `bytes` as a new generation on a thread of its own, giving up after
/// [`LOAD_TIMEOUT`] (the thread is then abandoned; it holds no lock).
pub(crate) fn load_with_timeout(
    path: &Path,
    bytes: bytes::Bytes,
    context: ToolsContext,
) -> Result<LoadedPlugin, Rejection> {
    let (send, receive) = std::sync::mpsc::channel();
    let path_owned = path.to_owned();
    std::thread::Builder::new()
        .name("plugin-load".into())
        .spawn(move || {
            let _ = send.send(load_bytes(&path_owned, &bytes, &context));
        })
        .map_err(|e| Rejection::Open(format!("cannot start a thread to load it: {e}")))?;
    receive.recv_timeout(LOAD_TIMEOUT).unwrap_or(Err(Rejection::Hung))
}

/// Loads the bytes of the plugin file `path` as a new generation, asking for its tools and
/// prompt sections in `context`.
pub(crate) fn load_bytes(
    path: &Path,
    bytes: &[u8],
    context: &ToolsContext,
) -> Result<LoadedPlugin, Rejection> {
    let started = std::time::Instant::now();
    precheck(bytes)?;
    let generation = Generation(NEXT_GENERATION.fetch_add(1, Ordering::Relaxed));
    let stem = path.file_stem().map_or_else(|| "plugin".into(), |s| s.to_string_lossy());
    let (fd, copy) = private_copy(&format!("hotsh-{stem}-{generation}"), bytes)
        .map_err(|e| Rejection::Open(format!("cannot make a private copy in memory: {e}")))?;
    let library = RawLibrary::load_at(&copy).map_err(|e| {
        Rejection::Open(
            one_line(&e.to_string()).replace(&*copy.to_string_lossy(), &path.to_string_lossy()),
        )
    })?;
    release_unmapped(fd, bytes);
    // SAFETY: the library is never unloaded (forgotten below), so the header's 'static
    // references stay valid.
    let mut abi_version = String::new();
    let api = unsafe { lib_header_from_raw_library(&library) }.and_then(|header| {
        // Copied out at once: the string lives in the library.
        abi_version = header.version_strings().version.as_str().to_owned();
        adapter(header)
    });
    // Never unload, even on failure: an error value may still point into the library.
    std::mem::forget(library);
    let api = api.map_err(reject)?;
    let manifest = api.manifest().map_err(Rejection::Plugin)?;
    let tools = api.tools(context).map_err(Rejection::Plugin)?;
    let prompt_sections = api.prompt_sections(context).map_err(Rejection::Plugin)?;
    let hooks = api.hooks(context).map_err(Rejection::Plugin)?;
    Ok(LoadedPlugin {
        generation,
        path: path.to_owned(),
        name: manifest.0,
        version: manifest.1,
        content_hash: content_hash(bytes),
        abi_version,
        loaded_at: std::time::SystemTime::now(),
        load_took: started.elapsed(),
        tools,
        prompt_sections,
        hooks,
        api,
    })
}

/// The adapter for the interface the library declares, by its major version: one per major
/// version this host speaks (a 2.x would get its own beside 1.x). Within a major version,
/// hotsh-abi's rule applies (`hotsh_abi::load`): the older side's layout must be what the
/// newer side's begins with.
fn adapter(header: &LibHeader) -> Result<PluginV1, LibraryError> {
    let declared = hotsh_abi::load::declared_version(header)?;
    match declared.major {
        V1 => hotsh_abi::load::plugin_module(header).map(PluginV1::new),
        _ => Err(LibraryError::IncompatibleVersionNumber {
            library_name: "hotsh_plugin",
            expected_version: hotsh_abi::load::this_version(),
            actual_version: declared,
        }),
    }
}

fn reject(error: LibraryError) -> Rejection {
    match error {
        LibraryError::GetSymbolError { .. } | LibraryError::InvalidAbiHeader(_) => {
            Rejection::NotAPlugin
        }
        LibraryError::IncompatibleVersionNumber { expected_version, actual_version, .. } => {
            Rejection::Version {
                expected: expected_version.to_string(),
                found: actual_version.to_string(),
            }
        }
        LibraryError::AbiInstability(details) => {
            let report = details.to_string();
            tracing::debug!("abi_stable layout report:\n{report}");
            layout_rejection(&report)
        }
        LibraryError::RootModule { err: RootModuleError::Unwound, .. } => {
            Rejection::ConstructorPanicked
        }
        other => Rejection::Open(one_line(&other.to_string())),
    }
}

/// A rejection for abi_stable's layout report: another `0.y` of the interface, or a summary of
/// what differs.
fn layout_rejection(report: &str) -> Rejection {
    let differences = layout_differences(report);
    if let Some(version) = differences.iter().find(|d| d.error == "incompatible package versions") {
        return Rejection::Version {
            expected: version.expected.clone(),
            found: version.found.clone(),
        };
    }
    Rejection::Layout(layout_summary(&differences))
}

/// One difference abi_stable found, with where it is (the path of types down to it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Difference {
    pub(crate) place: String,
    pub(crate) error: String,
    pub(crate) expected: String,
    pub(crate) found: String,
}

/// Reads abi_stable's layout report (often hundreds of lines): each `N error(s)inside:` block
/// names a path of fields and types, and each `Error:` that follows has `Expected:` and
/// `Found:` values.
pub(crate) fn layout_differences(report: &str) -> Vec<Difference> {
    let lines: Vec<&str> = report.lines().collect();
    let mut differences = Vec::new();
    let mut place = String::new();
    let mut index = 0;
    while index < lines.len() {
        let line = lines[index].trim();
        if line.ends_with("error(s)inside:") && !line.starts_with("0 ") {
            place = path_of(&lines[index + 1..]);
        } else if let Some(error) = line.strip_prefix("Error:") {
            let expected = value_after(&lines, index, "Expected:");
            let found = value_after(&lines, index, "Found:");
            differences.push(Difference {
                place: place.clone(),
                error: error.trim().to_owned(),
                expected,
                found,
            });
        }
        index += 1;
    }
    differences.dedup();
    differences
}

/// `PluginModule.invoke → &'a ToolCall → ToolCall` from the lines after `inside:`.
fn path_of(lines: &[&str]) -> String {
    let mut path = String::new();
    let mut field = "";
    for line in lines.iter().map(|l| l.trim()) {
        if line.starts_with("Layout of expected type") {
            break;
        }
        if let Some(name) = line.strip_prefix("field_name:") {
            field = name;
        } else if let Some(kind) = line.strip_prefix("type:") {
            let kind = kind.split_whitespace().collect::<Vec<_>>().join(" ");
            if kind == "AFunctionPointer" {
                path.push('.');
                path.push_str(field);
            } else {
                if !path.is_empty() {
                    path.push_str(" → ");
                }
                path.push_str(&kind);
            }
        }
    }
    path
}

/// The value under `key` (`Expected:` or `Found:`) following the `Error:` at `at`: a field as
/// `name: type`, otherwise the first line.
fn value_after(lines: &[&str], at: usize, key: &str) -> String {
    let Some(start) = lines[at + 1..].iter().position(|l| l.trim() == key) else {
        return String::new();
    };
    let values: Vec<&str> = lines[at + 1 + start + 1..]
        .iter()
        .map(|l| l.trim())
        .take_while(|l| !l.is_empty() && !l.ends_with(':') && !l.starts_with("Error:"))
        .collect();
    let field = values.iter().find_map(|l| l.strip_prefix("field_name:"));
    let kind = values.iter().find_map(|l| l.strip_prefix("type:"));
    match (field, kind) {
        (Some(field), Some(kind)) => format!("{field}: {}", kind.trim()),
        _ => values.first().map_or_else(String::new, |v| (*v).to_owned()),
    }
}

/// A few lines saying what differs, grouped by place.
pub(crate) fn layout_summary(differences: &[Difference]) -> String {
    const SHOWN: usize = 6;
    let mut lines: Vec<String> = Vec::new();
    let mut place = None;
    for difference in differences.iter().take(SHOWN) {
        if place != Some(&difference.place) {
            place = Some(&difference.place);
            lines.push(format!("in {}:", difference.place));
        }
        lines.push(format!(
            "  {}: expected {}, found {}",
            difference.error, difference.expected, difference.found
        ));
    }
    if differences.len() > SHOWN {
        lines.push(format!(
            "  ({} more differences; HOTSH_LOG=debug shows the full report)",
            differences.len() - SHOWN
        ));
    }
    if lines.is_empty() {
        return "abi_stable reported a mismatch it did not detail (HOTSH_LOG=debug shows the report)".to_owned();
    }
    lines.join("\n")
}

/// A multi-line message (abi_stable's are) as one line, every part kept.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Copies `bytes` into a new anonymous memory file and returns its descriptor and the path
/// that opens it (`/proc/self/fd/N`). The descriptor is never closed: its number, and so the
/// path, stays unique to this copy for the life of the process, which the dynamic loader's
/// cache by name requires.
fn private_copy(
    name: &str,
    bytes: &[u8],
) -> std::io::Result<(std::os::fd::BorrowedFd<'static>, PathBuf)> {
    use std::io::Write as _;
    use std::os::fd::IntoRawFd as _;
    let name = std::ffi::CString::new(name.replace('\0', "_")).map_err(std::io::Error::other)?;
    let mut file = crate::executor::anonymous_file(&name)?;
    file.write_all(bytes)?;
    let fd = file.into_raw_fd();
    // SAFETY: the descriptor is never closed (see above), so it outlives every borrow.
    let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    Ok((borrowed, crate::executor::descriptor_path(fd)))
}

/// Alignment of the parts of a private copy that are kept: the largest page size of Linux's
/// architectures, so a freed range never shares a page with a mapped one whatever the page
/// size.
const KEEP_ALIGN: u64 = 64 << 10;

/// Frees the parts of a loaded private copy that the dynamic loader did not map (debug
/// information, the symbol table, section headers): a memory file holds all it was given for
/// as long as it is open, which is the life of the process (generations are never unloaded),
/// and a debug build is mostly debug information (a plugin's of 15 MB maps 1.3). Nothing
/// reads the file once it is loaded; a backtrace through the plugin loses its function
/// names, which a copy loaded through `/proc/self/fd` already had for every debugger. The
/// kept parts are every program header's range (the loaded segments hold all the others),
/// widened to [`KEEP_ALIGN`]; with headers that cannot be read, nothing is freed.
fn release_unmapped(fd: std::os::fd::BorrowedFd<'_>, bytes: &[u8]) {
    let Some(kept) = mapped_ranges(bytes) else { return };
    for hole in holes(&kept, bytes.len() as u64) {
        if let Err(error) = crate::executor::free_range(fd, hole.start, hole.end - hole.start) {
            tracing::debug!(%error, "cannot free the unmapped parts of a plugin's private copy");
            return;
        }
    }
}

/// The file ranges of a 64-bit little-endian ELF's program headers (and the headers
/// themselves), each widened to [`KEEP_ALIGN`], sorted; `None` if the headers are not all
/// within `bytes`.
fn mapped_ranges(bytes: &[u8]) -> Option<Vec<std::ops::Range<u64>>> {
    let elf = Elf64::of(bytes)?;
    let (table, size, count) = (elf.u64_at(0x20)?, u64::from(elf.u16_at(0x36)?), elf.u16_at(0x38)?);
    // An Elf64_Phdr is 56 bytes.
    if size < 56 {
        return None;
    }
    let widen = |start: u64, len: u64| {
        let end = start.checked_add(len)?.checked_next_multiple_of(KEEP_ALIGN)?;
        Some(start - start % KEEP_ALIGN..end)
    };
    let mut kept = vec![widen(0, table.checked_add(size * u64::from(count))?)?];
    for header in 0..u64::from(count) {
        let at = usize::try_from(table + header * size).ok()?;
        // `p_offset` at 8, `p_filesz` at 32 (Elf64_Phdr).
        let (offset, len) = (elf.u64_at(at + 8)?, elf.u64_at(at + 32)?);
        if len > 0 {
            kept.push(widen(offset, len)?);
        }
    }
    kept.sort_by_key(|range| range.start);
    Some(kept)
}

/// The ranges of `0..len` outside every one of `kept` (sorted by start).
fn holes(kept: &[std::ops::Range<u64>], len: u64) -> Vec<std::ops::Range<u64>> {
    let mut holes = Vec::new();
    let mut from = 0;
    for range in kept {
        if range.start > from {
            holes.push(from..range.start.min(len));
        }
        from = from.max(range.end);
    }
    if from < len {
        holes.push(from..len);
    }
    holes.retain(|hole| hole.start < hole.end);
    holes
}

/// True when `bytes` is a 64-bit little-endian ELF whose section header table (written last
/// by the linker) lies entirely within the file.
pub(crate) fn is_complete_elf(bytes: &[u8]) -> bool {
    let section_headers_end = || {
        let elf = Elf64::of(bytes)?;
        let len = u64::from(elf.u16_at(0x3A)?) * u64::from(elf.u16_at(0x3C)?);
        elf.u64_at(0x28)?.checked_add(len)
    };
    section_headers_end().is_some_and(|end| end > 0 && end <= bytes.len() as u64)
}

/// The bytes of a 64-bit little-endian ELF file with its whole header (64 bytes), read
/// field by field; a field past the end reads as `None`.
struct Elf64<'a>(&'a [u8]);

impl<'a> Elf64<'a> {
    fn of(bytes: &'a [u8]) -> Option<Self> {
        (bytes.len() >= 64 && bytes.starts_with(b"\x7fELF\x02\x01")).then_some(Self(bytes))
    }

    fn u16_at(&self, at: usize) -> Option<u16> {
        Some(u16::from_le_bytes(self.0.get(at..at.checked_add(2)?)?.try_into().ok()?))
    }

    fn u64_at(&self, at: usize) -> Option<u64> {
        Some(u64::from_le_bytes(self.0.get(at..at.checked_add(8)?)?.try_into().ok()?))
    }
}

/// Identifies a build by content (SipHash; collisions are not a security concern here, a
/// changed build only needs to look changed).
pub(crate) fn content_hash(bytes: &[u8]) -> u64 {
    use std::hash::{DefaultHasher, Hasher};
    let mut hasher = DefaultHasher::new();
    hasher.write(bytes);
    hasher.finish()
}

/// [`content_hash`] of the file `path`, read a piece at a time (nothing of its size held).
pub(crate) fn file_content_hash(path: &Path) -> std::io::Result<u64> {
    use std::hash::{DefaultHasher, Hasher};
    use std::io::Read as _;
    let mut file = std::fs::File::open(path)?;
    let mut hasher = DefaultHasher::new();
    let mut piece = vec![0; 64 * 1024];
    loop {
        match file.read(&mut piece) {
            Ok(0) => return Ok(hasher.finish()),
            // The hasher takes its input as one stream, whatever the pieces.
            Ok(read) => hasher.write(&piece[..read]),
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_hashed_a_piece_at_a_time_hashes_as_its_bytes_do() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("lib.so");
        for size in [0, 1, 7, 64 * 1024, 64 * 1024 + 3, 200_003] {
            let bytes: Vec<u8> = (0..size).map(|i| (i * 31 % 251) as u8).collect();
            std::fs::write(&path, &bytes).expect("written");
            assert_eq!(file_content_hash(&path).expect("read"), content_hash(&bytes), "{size}");
        }
    }

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
    fn only_what_the_program_headers_name_is_kept_of_a_private_copy() {
        const K: u64 = KEEP_ALIGN;
        // Two program headers at 64: one from 0 to 3K+10, one at 5K-1 for 2 bytes; a file
        // of 9K+5 (the rest stands for debug information and section headers).
        let mut elf = vec![0u8; (9 * K + 5) as usize];
        elf[..6].copy_from_slice(b"\x7fELF\x02\x01");
        elf[0x20..0x28].copy_from_slice(&64u64.to_le_bytes());
        elf[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
        elf[0x38..0x3A].copy_from_slice(&2u16.to_le_bytes());
        for (at, offset, len) in [(64, 0, 3 * K + 10), (120, 5 * K - 1, 2)] {
            elf[at + 8..at + 16].copy_from_slice(&offset.to_le_bytes());
            elf[at + 32..at + 40].copy_from_slice(&len.to_le_bytes());
        }
        let kept = mapped_ranges(&elf).expect("readable headers");
        assert_eq!(kept, [0..K, 0..4 * K, 4 * K..6 * K]);
        let tail = 6 * K..9 * K + 5;
        assert_eq!(holes(&kept, elf.len() as u64), vec![tail]);
        assert_eq!(holes(&[K..2 * K, 3 * K..4 * K], 5 * K), [0..K, 2 * K..3 * K, 4 * K..5 * K]);

        // Headers past the end of the file, or another kind of file: nothing is freed.
        elf[0x38..0x3A].copy_from_slice(&60_000u16.to_le_bytes());
        assert_eq!(mapped_ranges(&elf), None);
        assert_eq!(mapped_ranges(b"#!/bin/sh\n"), None);
    }

    #[test]
    fn layout_report_becomes_a_short_summary() {
        let report = "\
0 error(s)inside:
    <other>
3 error(s)inside:
    <other>
    field_name:0
    type:PluginModule
    field_name:invoke
    type:AFunctionPointer
    field_name:,,
    type:&'a  ToolCall
    field_name:0
    type:ToolCall
Layout of expected type:
    type:ToolCall
Error:incompatible type size
Expected:
    160
Found:
    168

Error:unexpected field
Expected:
    field_name:session_id
    type:RString
    size:32 align:8
Found:
    field_name:added_field
    type:u64
";
        assert_eq!(
            layout_summary(&layout_differences(report)),
            "in PluginModule.invoke → &'a ToolCall → ToolCall:\n  \
             incompatible type size: expected 160, found 168\n  \
             unexpected field: expected session_id: RString, found added_field: u64"
        );
    }

    #[test]
    fn another_package_version_is_a_version_rejection() {
        let report = "1 error(s)inside:\n    type:PluginModule\nError:incompatible package versions\nExpected:\n    0.1.0\nFound:\n    0.2.0\n";
        assert!(matches!(
            layout_rejection(report),
            Rejection::Version { expected, found } if expected == "0.1.0" && found == "0.2.0"
        ));
    }
}
