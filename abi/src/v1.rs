//! Version 1 of the plugin interface. **Frozen once released**: new optional functions are
//! appended after the field marked `#[sabi(last_prefix_field)]`, new host services after the
//! method marked so; anything else is a breaking change and goes into a `v2` module, with the
//! host keeping an adapter per version.
//!
//! Data crosses the boundary in two forms. Free-form structured data (tool arguments, JSON
//! schemas, a tool's structured result) crosses as JSON text, which keeps the interface small
//! and lets plugins evolve their own formats. Everything the host must understand to do its
//! job (cards, command specs and outcomes) crosses as `#[repr(C)]` types whose layout
//! abi_stable checks when a library is loaded.

// `#[sabi_trait]` expands to impl blocks inside a const item.
#![allow(non_local_definitions)]

use abi_stable::library::RootModule;
use abi_stable::sabi_types::VersionStrings;
use abi_stable::std_types::{RBox, ROption, RResult, RStr, RString, RVec};
use abi_stable::{StableAbi, declare_root_module_statics, package_version_strings, sabi_trait};

/// The name and version a plugin reports about itself.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// The plugin's name: cards and logs name it so, and two files with one name are one plugin.
    pub name: RString,
    /// The plugin's own version, shown with its name.
    pub version: RString,
}

impl Manifest {
    /// A manifest naming the plugin `name` at `version`.
    pub fn new(name: &str, version: &str) -> Self {
        Self { name: name.into(), version: version.into() }
    }
}

/// A tool the model can call.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub struct ToolSpec {
    /// Unique across all loaded plugins; the model calls the tool by this name.
    pub name: RString,
    /// What the model reads to decide when and how to call the tool.
    pub description: RString,
    /// JSON Schema of the tool's arguments, as JSON text.
    pub input_schema: RString,
    /// What its calls may do, for what the host offers when (see [`ToolEffects`]).
    pub effects: ToolEffects,
}

impl ToolSpec {
    /// A tool whose calls only read (no commands, no file writes); declare more with
    /// [`ToolSpec::runs_commands`] and [`ToolSpec::writes_files`].
    pub fn new(name: &str, description: &str, input_schema: &serde_json::Value) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
            input_schema: input_schema.to_string().into(),
            effects: ToolEffects::default(),
        }
    }

    /// Its calls run commands (through [`HostServices::run`] or [`HostServices::start`]).
    #[must_use]
    pub fn runs_commands(mut self) -> Self {
        self.effects.runs_commands = true;
        self
    }

    /// Its calls write files (through [`HostServices::write_text_file`]).
    #[must_use]
    pub fn writes_files(mut self) -> Self {
        self.effects.writes_files = true;
        self
    }
}

/// What a tool's calls may do, as the tool declares it. The host decides from it what to
/// offer the model (in plan mode without a backend that can confine commands, no tool that
/// runs commands is offered); what a call actually does is still checked by the host services
/// it goes through (the sandbox gates every command and write), so a wrong declaration hides
/// or shows a tool, and allows nothing.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ToolEffects {
    /// Its calls run commands (through [`HostServices::run`] or [`HostServices::start`]).
    pub runs_commands: bool,
    /// Its calls write files (through [`HostServices::write_text_file`]).
    pub writes_files: bool,
}

/// A piece of the system prompt. The host sorts all loaded sections by `order`, then `id`.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub struct PromptSection {
    /// Stable identifier, e.g. `tool:bash`.
    pub id: RString,
    /// Sections are sorted by this, lowest first (the host's own come at 0 to 99).
    pub order: u32,
    /// The section's text (markdown), as the model reads it.
    pub text: RString,
}

impl PromptSection {
    /// A section `id` at `order` with `text`.
    pub fn new(id: &str, order: u32, text: &str) -> Self {
        Self { id: id.into(), order, text: text.into() }
    }
}

/// One call of one tool, as the host hands it to [`Plugin::invoke`] and the presenters.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    /// The host's id for this call (also the client's card id).
    pub call_id: RString,
    /// The session the call belongs to; an opaque token.
    pub session_id: RString,
    /// The tool called (one of the plugin's own).
    pub tool: RString,
    /// The model's arguments, as JSON text. Not validated by the host.
    pub arguments: RString,
    /// The session's working directory (absolute).
    pub cwd: RString,
}

impl ToolCall {
    /// `path` made absolute against the session's cwd, with `.` and `..` taken out lexically
    /// (symlinks are not followed).
    pub fn absolute_path(&self, path: &str) -> std::path::PathBuf {
        absolute_path(std::path::Path::new(self.cwd.as_str()), path)
    }

    /// Parses the arguments into `T`, with an error message written for the model to read.
    pub fn arguments<T: serde::de::DeserializeOwned>(&self) -> Result<T, String> {
        serde_json::from_str(&self.arguments)
            .map_err(|e| format!("invalid arguments for `{}`: {e}", self.tool))
    }
}

/// `path` made absolute against `cwd`, with `.` and `..` taken out lexically (symlinks are
/// not followed; `..` at the root stays at the root).
pub fn absolute_path(cwd: &std::path::Path, path: &str) -> std::path::PathBuf {
    use std::path::Component;
    let mut resolved = std::path::PathBuf::new();
    for component in cwd.join(path).components() {
        match component {
            Component::ParentDir => {
                resolved.pop();
            }
            Component::CurDir => {}
            other => resolved.push(other),
        }
    }
    resolved
}

/// What a successful call returns.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub struct ToolOutput {
    /// What the model reads.
    pub text: RString,
    /// The structured result as JSON text (`null` if none); the client receives it as the
    /// final card's raw output.
    pub raw_output: RString,
}

impl ToolOutput {
    /// An output of `text` for the model and `raw_output` for the client.
    pub fn new(text: impl Into<String>, raw_output: &serde_json::Value) -> Self {
        Self { text: text.into().into(), raw_output: raw_output.to_string().into() }
    }
}

/// How a call is shown to the user. Presentation is pure and display-only: it sees only the
/// call (and result), so the host can rebuild every card from its log.
#[repr(u8)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub enum Card {
    /// A live terminal labelled with the exact command; the host streams the command's output
    /// into it and closes it with the exit status.
    Terminal(TerminalCard),
    /// Anything else: a title, a kind and optional markdown content.
    Generic(GenericCard),
}

#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
/// The card of a command: a terminal the client labels with the command.
pub struct TerminalCard {
    /// The exact command line, shown as the card's title.
    pub command: RString,
    /// What the command does, in a few words (the model's `description`), shown with it.
    pub description: ROption<RString>,
    /// Absolute directory the command runs in.
    pub cwd: RString,
    /// How the command ended; `None` while it runs.
    pub exit: ROption<TerminalExit>,
}

#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
/// How a terminal card's command ended.
pub struct TerminalExit {
    /// The exit code; `None` when a signal ended it.
    pub exit_code: ROption<i32>,
    /// Signal name such as `SIGKILL`, when a signal ended the command.
    pub signal: ROption<RString>,
}

#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
/// The card of anything that is not a command.
pub struct GenericCard {
    /// One line: what the call does.
    pub title: RString,
    /// The icon the client shows.
    pub kind: ToolKind,
    /// Markdown shown in the card's body.
    pub content: ROption<RString>,
    /// Places in files the call touches; the client may follow along.
    pub locations: RVec<Location>,
    /// Changes to files, shown by the client as diffs it can review.
    pub diffs: RVec<Diff>,
}

impl GenericCard {
    /// A card with a title, a kind and optional markdown, and no locations or diffs.
    pub fn new(title: impl Into<String>, kind: ToolKind, content: Option<String>) -> Self {
        Self {
            title: title.into().into(),
            kind,
            content: content.map(RString::from).into(),
            locations: RVec::new(),
            diffs: RVec::new(),
        }
    }
}

/// A place in a file.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// Absolute path.
    pub path: RString,
    /// 1-based line, when the call is about one place in the file.
    pub line: ROption<u32>,
}

/// A change to one file.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub struct Diff {
    /// Absolute path.
    pub path: RString,
    /// The text before the change; `None` for a new file.
    pub old_text: ROption<RString>,
    /// The text after the change.
    pub new_text: RString,
}

/// The category of a tool call, mirrored by the client's icon.
#[repr(u8)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolKind {
    /// Reads files or state.
    Read,
    /// Changes a file.
    Edit,
    /// Removes something.
    Delete,
    /// Moves or renames something.
    Move,
    /// Searches.
    Search,
    /// Runs a command.
    Execute,
    /// Thinks or plans, touching nothing.
    Think,
    /// Fetches from the network.
    Fetch,
    /// Anything else.
    Other,
}

/// The card of a finished call and how it is shown.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub struct FinalCard {
    /// The card as the call ended.
    pub card: Card,
    /// How the call ended, as the card shows it.
    pub status: CardStatus,
}

#[repr(u8)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq)]
/// How a finished call's card is shown.
pub enum CardStatus {
    /// The call did what it was asked.
    Completed,
    /// The call failed (the model read an error).
    Failed,
    /// The call started a background task: the card stays open, and the host closes it with the
    /// task's outcome when the task ends.
    Running,
}

/// What the host tells a plugin when it asks for its tools and prompt sections.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub struct ToolsContext {
    /// The executor confines commands to sandbox modes: a tool that runs commands may offer
    /// escalation ([`CommandSpec::sandbox_permissions`]) and explain denials.
    pub sandboxed: bool,
}

/// The sandbox modes, narrowest first (the order is part of the contract).
#[repr(u8)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SandboxMode {
    /// No writes anywhere, no network.
    ReadOnly,
    /// Writes only under the session's cwd and `$TMPDIR` (the cwd's `.git` stays read-only);
    /// no network unless the host's configuration allows it.
    WorkspaceWrite,
    /// Unconfined.
    DangerFullAccess,
}

impl SandboxMode {
    /// `read-only`, `workspace-write`, `danger-full-access`.
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxMode::ReadOnly => "read-only",
            SandboxMode::WorkspaceWrite => "workspace-write",
            SandboxMode::DangerFullAccess => "danger-full-access",
        }
    }

    /// The mode named `text` (as [`SandboxMode::as_str`] spells it), if it is one.
    pub fn parse(text: &str) -> Option<Self> {
        [SandboxMode::ReadOnly, SandboxMode::WorkspaceWrite, SandboxMode::DangerFullAccess]
            .into_iter()
            .find(|mode| mode.as_str() == text)
    }
}

/// A wider mode for one command, which the host grants only if the user allows it.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub struct SandboxRequest {
    /// The mode wanted.
    pub mode: SandboxMode,
    /// Why, in the model's words; shown to the user with the exact command.
    pub justification: RString,
}

/// A command for the host's bash executor.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub struct CommandSpec {
    /// Run as `bash -c <command>`.
    pub command: RString,
    /// Absolute working directory.
    pub workdir: RString,
    /// `None` means the executor's default (120 s); values above its maximum (600 s) are
    /// lowered to the maximum, and the outcome reports the timeout that applied.
    pub timeout_ms: ROption<u64>,
    /// Run this one command under a wider mode, if the user allows it. The host asks before
    /// anything runs; a refusal is an error and nothing executes.
    pub sandbox_permissions: ROption<SandboxRequest>,
}

/// How the sandbox treated a command.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub struct SandboxFacts {
    /// The mode the command ran under.
    pub mode: SandboxMode,
    /// `bwrap`, `landlock`, or `off`.
    pub backend: RString,
    /// `full`, `partial: <what is not enforced>`, or `none` (unconfined).
    pub enforcement: RString,
    /// The failure looks like the sandbox refusing something: `file`, `network` or `syscall`.
    pub denial: ROption<RString>,
    /// A wider mode could be asked for (and would cure the denial): the tool may say so.
    pub escalation_available: bool,
}

/// How a foreground command ended. A non-zero exit, a timeout or an abort are outcomes, not
/// errors: only an infrastructure failure (bad workdir, no shell) is an error.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub struct CommandOutcome {
    /// `None` when a signal ended the command.
    pub exit_code: ROption<i32>,
    /// Name of the signal that ended the command, e.g. `SIGKILL`.
    pub signal: ROption<RString>,
    /// The timer fired (the command may still have exited 0 while being stopped).
    pub timed_out: bool,
    /// The timeout that applied, in milliseconds.
    pub timeout_ms: u64,
    /// The user cancelled the turn while the command ran.
    pub aborted: bool,
    /// Bounded for the model: a long stream keeps its head and tail around a marker.
    pub stdout: RString,
    /// Bounded for the model, as `stdout` is.
    pub stderr: RString,
    /// Some output is missing from `stdout`/`stderr`.
    pub truncated: bool,
    /// The file holding the merged stream, when the output was truncated.
    pub spill_path: ROption<RString>,
    /// Bytes in the spill file: less than `total_bytes` when the file reached its size limit.
    pub spill_bytes: u64,
    /// Bytes the command wrote to stdout and stderr.
    pub total_bytes: u64,
    /// How long the command ran.
    pub duration_ms: u64,
    /// How the sandbox treated it.
    pub sandbox: SandboxFacts,
}

/// A background task as the host reports it.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub struct TaskStatus {
    /// Running, or how it ended.
    pub state: TaskState,
    /// Set once the task has exited normally.
    pub exit_code: ROption<i32>,
    /// Name of the signal that ended the task, e.g. `SIGTERM`.
    pub signal: ROption<RString>,
}

#[repr(u8)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq)]
/// Where a background task is in its life.
pub enum TaskState {
    /// It runs.
    Running,
    /// Ended on its own (see the exit code or signal).
    Exited,
    /// Ended because it was killed (`kill`, or the host shutting down).
    Killed,
}

/// A background task that was just started.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub struct TaskStarted {
    /// `<tool>-N`: the name of the tool whose call started it and a number unique within the
    /// host process (`bash-3`).
    pub task_id: RString,
    /// The file that receives the task's full output.
    pub output_path: RString,
}

/// Output produced since the previous read (each byte is delivered once).
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub struct TaskOutput {
    /// What the task printed since the previous read (bounded: see `dropped_bytes`).
    pub text: RString,
    /// Bytes that were produced since the previous read but no longer fit the host's bound;
    /// they are in `output_path`.
    pub dropped_bytes: u64,
    /// The file holding the task's whole output.
    pub output_path: RString,
    /// Its status now.
    pub status: TaskStatus,
}

/// What a kill did.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub struct KillOutcome {
    /// False when the task had already ended: nothing was killed.
    pub killed: bool,
    /// The task's final status.
    pub status: TaskStatus,
}

#[repr(u8)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq)]
/// How important a plugin's log line is (the host's log level filters it).
pub enum LogLevel {
    /// Something failed.
    Error,
    /// Something is wrong but the call goes on.
    Warn,
    /// Worth knowing.
    Info,
    /// Detail for debugging.
    Debug,
}

/// What the host offers a plugin during one call. The object is bound to that call: output of
/// a command it runs streams into the call's card, and cancelling the turn aborts it.
///
/// Methods block until the host has answered; plugin calls run on a host thread made for
/// blocking.
#[sabi_trait]
pub trait HostServices: Send + Sync {
    /// Runs a command in the foreground and returns when it has ended.
    fn run(&self, spec: CommandSpec) -> RResult<CommandOutcome, RString>;

    /// Writes to the host's log (stderr), tagged with the plugin's name.
    fn log(&self, level: LogLevel, message: RStr<'_>);

    /// Starts a command in the background (no timeout; `spec.timeout_ms` is ignored) owned by
    /// the calling session, and returns at once.
    fn start(&self, spec: CommandSpec) -> RResult<TaskStarted, RString>;

    /// The output of a task produced since the previous read, and its status. Errors for an
    /// unknown task id.
    fn read_output(&self, task_id: RStr<'_>) -> RResult<TaskOutput, RString>;

    /// Kills a task's whole process group and returns once it has ended. Killing a task that
    /// already ended is not an error: `killed` is false. Errors for an unknown task id.
    fn kill(&self, task_id: RStr<'_>) -> RResult<KillOutcome, RString>;

    /// The owner token (the session id) recorded when the task started. Errors for an unknown
    /// task id. The host does not check ownership in `read_output`/`kill`: the tool does, so
    /// it can word the refusal.
    fn owner_of(&self, task_id: RStr<'_>) -> RResult<ROption<RString>, RString>;

    /// Reads a text file: through the client when it offers reading (the user's unsaved
    /// buffer), else from disk. Errors (with a message for the model) for a missing file (the
    /// message then ends with `: no such file`), a directory, a binary or oversized file, a
    /// path with NUL, a client that fails.
    fn read_text_file(&self, read: FileRead) -> RResult<FileText, RString>;

    /// Writes a text file under the session's sandbox mode: through the client when it offers
    /// writing, else to disk through a temporary file renamed into place. A sandbox refusal is
    /// not an error: `written` is false and `sandbox.denial` says why.
    #[sabi(last_prefix_field)]
    fn write_text_file(&self, write: FileWrite) -> RResult<FileWritten, RString>;
}

/// A read of a text file.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub struct FileRead {
    /// Absolute, or relative to the session's cwd.
    pub path: RString,
    /// The model sees this text: the host remembers it, so a later write can tell whether the
    /// file changed since (see [`FileText::seen`]).
    pub remember: bool,
}

/// A text file as read.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub struct FileText {
    /// The absolute path the file was read from.
    pub path: RString,
    /// The file's whole text.
    pub text: RString,
    /// Read from the client's buffer rather than the disk.
    pub from_client: bool,
    /// How this text compares with what the model last saw of the file in this session
    /// (before this read is remembered).
    pub seen: Seen,
}

/// Whether the model has seen a file's current text.
#[repr(u8)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// The model never read (or wrote) the file in this session.
    Never,
    /// The model's last read or write of the file left exactly this text.
    Same,
    /// The file changed (on disk or in the buffer) since the model last read or wrote it.
    Changed,
}

/// A write of a whole text file.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub struct FileWrite {
    /// Absolute, or relative to the session's cwd.
    pub path: RString,
    /// The new text, whole.
    pub text: RString,
    /// The text the new one was made from: the host writes only if the file still holds it
    /// (`None`: no such check, e.g. a new file).
    pub expected: ROption<RString>,
    /// Write under a wider mode, if the user allows it (as for commands).
    pub sandbox_permissions: ROption<SandboxRequest>,
}

/// What a write did.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub struct FileWritten {
    /// The absolute path written (symlinks resolved).
    pub path: RString,
    /// False when the sandbox refused it (see `sandbox.denial`).
    pub written: bool,
    /// The file did not exist before.
    pub created: bool,
    /// Written through the client's editor rather than to disk.
    pub through_client: bool,
    /// How the sandbox treated the write.
    pub sandbox: SandboxFacts,
}

/// The host services as a plugin receives them: borrowed for the duration of one call.
pub type HostRef<'a> = HostServices_TO<'a, abi_stable::sabi_types::RRef<'a, ()>>;

/// The owned form, for hosts and tests that build a services object.
pub type HostBox = HostServices_TO<'static, RBox<()>>;

/// The table of functions a plugin exports. Built by [`export_plugin!`](crate::export_plugin);
/// never written by hand.
#[repr(C)]
#[derive(StableAbi)]
#[allow(missing_debug_implementations, reason = "a table of function pointers")]
#[sabi(kind(Prefix(prefix_ref = PluginModuleRef)))]
pub struct PluginModule {
    /// The plugin's name and version.
    pub manifest: extern "C" fn() -> RResult<Manifest, RString>,
    /// The plugin's tools, in the context the host gives.
    pub tools: extern "C" fn(&ToolsContext) -> RResult<RVec<ToolSpec>, RString>,
    /// The plugin's sections of the system prompt, in the context the host gives.
    pub prompt_sections: extern "C" fn(&ToolsContext) -> RResult<RVec<PromptSection>, RString>,
    /// Runs one call, with the host services bound to it.
    pub invoke: extern "C" fn(&ToolCall, HostRef<'_>) -> RResult<ToolOutput, RString>,
    /// The card of a call as it starts (pure: it sees the call only).
    pub present_call: extern "C" fn(&ToolCall) -> RResult<Card, RString>,
    #[sabi(last_prefix_field)]
    /// The card of a call as it ended, and its status (pure: it sees the call and its output).
    pub present_result: extern "C" fn(&ToolCall, &ToolOutput) -> RResult<FinalCard, RString>,
    /// Called once when the host replaces or drops this generation of the plugin.
    pub shutdown: extern "C" fn() -> RResult<(), RString>,
}

impl RootModule for PluginModuleRef {
    declare_root_module_statics! {PluginModuleRef}
    const BASE_NAME: &'static str = "hotsh_plugin";
    const NAME: &'static str = "hotsh_plugin";
    const VERSION_STRINGS: VersionStrings = package_version_strings!();
}

/// What a plugin implements. All functions are associated functions: a plugin holds no state
/// (the host may load a new build at any moment and never unloads the old one).
pub trait Plugin {
    /// The plugin's name and version.
    fn manifest() -> Manifest;
    /// The tools the plugin offers.
    fn tools() -> Vec<ToolSpec>;
    /// Its sections of the system prompt (none by default).
    fn prompt_sections() -> Vec<PromptSection> {
        Vec::new()
    }
    /// The tools as offered by a host in `context`; by default [`Plugin::tools`].
    fn tools_in(context: &ToolsContext) -> Vec<ToolSpec> {
        let _ = context;
        Self::tools()
    }
    /// The prompt sections in `context`; by default [`Plugin::prompt_sections`].
    fn prompt_sections_in(context: &ToolsContext) -> Vec<PromptSection> {
        let _ = context;
        Self::prompt_sections()
    }
    /// Runs one call. `Err` is a tool error the model reads (bad arguments, a failure of the
    /// machinery); a command that ran and failed is an `Ok` describing the failure.
    fn invoke(call: &ToolCall, host: &HostRef<'_>) -> Result<ToolOutput, String>;
    /// The card of a call as it starts; pure (the host draws it again when a session is loaded).
    fn present_call(call: &ToolCall) -> Result<Card, String>;
    /// The card of a call as it ended, and its status; pure, like [`Plugin::present_call`].
    fn present_result(call: &ToolCall, output: &ToolOutput) -> Result<FinalCard, String>;
    /// Called when the host replaces or drops this build. Plugins hold no resources, so the
    /// default does nothing.
    fn shutdown() {}
}

#[cfg(test)]
mod tests {
    #[test]
    fn export_name_matches_abi_stable() {
        assert_eq!(
            abi_stable::library::ROOT_MODULE_LOADER_NAME,
            "_1as_0lib_1header_0root_bmodule_bloader"
        );
    }
}
