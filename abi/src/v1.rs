//! Interface 1.x: every type a plugin and the host exchange, and the module a plugin exports.
//! From 1.0 on, only appended to (see the crate's "Stability" section): a 1.x function goes
//! after [`PluginModule::shutdown`], a host service after [`HostServices::write_text_file`], a
//! tool kind, card status or other listed value is a new constant of its type, a kind of card
//! a new variant of [`Card`], a field of a record a typed accessor over its [`Extensions`].
//! Anything else is a 2.0 and goes into a `v2` module, the host keeping an adapter per major
//! version.
//!
//! Data crosses the boundary in two forms. Free-form structured data (tool arguments, JSON
//! schemas, a tool's structured result) crosses as JSON text, which keeps the interface small
//! and lets plugins evolve their own formats. Everything the host must understand to do its
//! job (cards, command specs and outcomes) crosses as `#[repr(C)]` types whose layout
//! abi_stable checks when a library is loaded.
//!
//! Records are `#[non_exhaustive]`: a plugin makes them with their constructors (`new`,
//! `Default`) and builder methods, reads and sets their public fields, and never writes a
//! struct literal, so a field added in 1.x breaks no plugin's code.

// `#[sabi_trait]` and `StableAbi` expand to impl blocks inside const items.
#![allow(non_local_definitions)]

use abi_stable::library::RootModule;
use abi_stable::sabi_types::VersionStrings;
use abi_stable::std_types::{RBox, ROption, RResult, RStr, RString, RVec};
use abi_stable::{StableAbi, declare_root_module_statics, package_version_strings, sabi_trait};

/// Defines a field-less type that may gain values in 1.x: a `u8` behind a
/// `#[repr(transparent)]` struct (abi_stable's growable form of a field-less enum), with one
/// constant per value. Constants are named like enum variants, so that a plugin writes and
/// matches them as it would an enum's; a match needs a `_` arm, for a value from a later 1.x.
macro_rules! open_enum {
    (
        $(#[$meta:meta])*
        pub struct $name:ident;
        default = $default:ident;
        $( $(#[$value_meta:meta])* $value:ident = $number:literal, $text:literal; )+
    ) => {
        $(#[$meta])*
        #[repr(transparent)]
        #[derive(StableAbi, Clone, Copy, PartialEq, Eq, Hash)]
        pub struct $name(u8);

        #[allow(non_upper_case_globals, reason = "named like the enum variants they stand for")]
        impl $name {
            $( $(#[$value_meta])* pub const $value: Self = Self($number); )+

            /// Every value this version of the interface defines, in order.
            pub const ALL: &'static [Self] = &[$(Self::$value),+];

            /// The value's name as text; `unknown` for a value this version of the interface
            /// does not define (one from a later 1.x).
            pub fn as_str(self) -> &'static str {
                match self {
                    $( Self::$value => $text, )+
                    _ => "unknown",
                }
            }

            /// The value named `text` (as [`as_str`](Self::as_str) spells it), if this version
            /// of the interface defines one.
            pub fn parse(text: &str) -> Option<Self> {
                Self::ALL.iter().copied().find(|value| value.as_str() == text)
            }

            /// Whether this version of the interface defines the value (false for one from a
            /// later 1.x: the receiver then does what the type's documentation says).
            pub fn is_known(self) -> bool {
                Self::ALL.contains(&self)
            }

            /// The number that crosses the boundary.
            pub const fn number(self) -> u8 {
                self.0
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::$default
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                if self.is_known() {
                    f.write_str(self.as_str())
                } else {
                    write!(f, "{}({})", stringify!($name), self.0)
                }
            }
        }
    };
}

/// Members added to a record in a later 1.x, as a JSON object (empty text: none).
///
/// Every record ends with one: a record cannot gain a field without changing its layout (only
/// abi_stable's prefix types can, and they cross by reference only), so a field added in 1.x
/// lives here, behind typed accessor methods of the record in the hotsh-abi that adds it. A
/// receiver built against an older 1.x ignores members it does not know; one built against
/// a newer 1.x reads a member an older sender did not write as absent, and its accessor says
/// what that means. Hosts and plugins never read or write the members by name.
#[repr(transparent)]
#[derive(StableAbi, Debug, Clone, Default, PartialEq, Eq)]
pub struct Extensions(RString);

impl Extensions {
    /// No members (what every record of a 1.0 sender carries).
    pub fn none() -> Self {
        Self::default()
    }

    /// Whether the record carries no members.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The names of the members, for a receiver that logs what it ignored.
    pub fn names(&self) -> Vec<String> {
        self.object().map(|members| members.keys().cloned().collect()).unwrap_or_default()
    }

    fn object(&self) -> Option<serde_json::Map<String, serde_json::Value>> {
        if self.0.is_empty() {
            return None;
        }
        serde_json::from_str(&self.0).ok()
    }

    /// The member `name` as a `T`: `None` when absent, or not a `T` (a sender's mistake is
    /// treated as absence).
    #[allow(dead_code, reason = "for the accessors of fields added in 1.x")]
    pub(crate) fn get<T: serde::de::DeserializeOwned>(&self, name: &str) -> Option<T> {
        let value = self.object()?.remove(name)?;
        serde_json::from_value(value).ok()
    }

    /// Sets the member `name` to `value`.
    #[allow(dead_code, reason = "for the accessors of fields added in 1.x")]
    pub(crate) fn set(&mut self, name: &str, value: impl serde::Serialize) {
        let mut members = self.object().unwrap_or_default();
        members.insert(name.to_owned(), serde_json::to_value(value).unwrap_or_default());
        self.0 = serde_json::Value::Object(members).to_string().into();
    }
}

/// The name and version a plugin reports about itself.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Manifest {
    /// The plugin's name: cards and logs name it so, and two files with one name are one plugin.
    pub name: RString,
    /// The plugin's own version, shown with its name.
    pub version: RString,
    /// Fields added in 1.x.
    pub extensions: Extensions,
}

impl Manifest {
    /// A manifest naming the plugin `name` at `version`.
    pub fn new(name: &str, version: &str) -> Self {
        Self { name: name.into(), version: version.into(), extensions: Extensions::none() }
    }
}

/// A tool the model can call.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ToolSpec {
    /// Unique across all loaded plugins; the model calls the tool by this name.
    pub name: RString,
    /// What the model reads to decide when and how to call the tool.
    pub description: RString,
    /// JSON Schema of the tool's arguments, as JSON text.
    pub input_schema: RString,
    /// What its calls may do, for what the host offers when (see [`ToolEffects`]).
    pub effects: ToolEffects,
    /// Fields added in 1.x.
    pub extensions: Extensions,
}

impl ToolSpec {
    /// A tool whose calls only read (no commands, no file writes); declare more with
    /// [`ToolSpec::runs_commands`] and [`ToolSpec::writes_files`].
    pub fn new(name: &str, description: &str, input_schema: &serde_json::Value) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
            input_schema: input_schema.to_string().into(),
            effects: ToolEffects::NONE,
            extensions: Extensions::none(),
        }
    }

    /// Its calls run commands (through [`HostServices::run`] or [`HostServices::start`]).
    #[must_use]
    pub fn runs_commands(mut self) -> Self {
        self.effects = self.effects.with(ToolEffects::RUNS_COMMANDS);
        self
    }

    /// Its calls write files (through [`HostServices::write_text_file`]).
    #[must_use]
    pub fn writes_files(mut self) -> Self {
        self.effects = self.effects.with(ToolEffects::WRITES_FILES);
        self
    }
}

/// What a tool's calls may do, as the tool declares it: a set of flags. The host decides from
/// it what to offer the model (in plan mode without a backend that can confine commands, no
/// tool that runs commands is offered); what a call actually does is still checked by the
/// host services it goes through (the sandbox gates every command and write), so a wrong
/// declaration hides or shows a tool, and allows nothing. A flag added in 1.x is ignored by a
/// host that does not know it.
#[repr(transparent)]
#[derive(StableAbi, Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct ToolEffects(u32);

impl ToolEffects {
    /// Its calls only read.
    pub const NONE: Self = Self(0);
    /// Its calls run commands (through [`HostServices::run`] or [`HostServices::start`]).
    pub const RUNS_COMMANDS: Self = Self(1);
    /// Its calls write files (through [`HostServices::write_text_file`]).
    pub const WRITES_FILES: Self = Self(1 << 1);

    /// These effects and `other`'s.
    #[must_use]
    pub const fn with(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }

    /// Whether every effect of `other` is among these.
    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    /// Its calls run commands.
    pub const fn runs_commands(self) -> bool {
        self.contains(Self::RUNS_COMMANDS)
    }

    /// Its calls write files.
    pub const fn writes_files(self) -> bool {
        self.contains(Self::WRITES_FILES)
    }
}

/// A piece of the system prompt. The host sorts all loaded sections by `order`, then `id`.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PromptSection {
    /// Stable identifier, e.g. `tool:bash`.
    pub id: RString,
    /// Sections are sorted by this, lowest first (the host's own come at 0 to 99).
    pub order: u32,
    /// The section's text (markdown), as the model reads it.
    pub text: RString,
    /// Fields added in 1.x.
    pub extensions: Extensions,
}

impl PromptSection {
    /// A section `id` at `order` with `text`.
    pub fn new(id: &str, order: u32, text: &str) -> Self {
        Self { id: id.into(), order, text: text.into(), extensions: Extensions::none() }
    }
}

/// One call of one tool, as the host hands it to [`Plugin::invoke`] and the presenters.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
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
    /// Fields added in 1.x.
    pub extensions: Extensions,
}

impl ToolCall {
    /// A call of `tool` with `arguments` (JSON text) in `cwd`; the ids are set by the host
    /// (tests of a plugin may leave them empty).
    pub fn new(tool: &str, arguments: &str, cwd: &str) -> Self {
        Self { tool: tool.into(), arguments: arguments.into(), cwd: cwd.into(), ..Self::default() }
    }

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
#[non_exhaustive]
pub struct ToolOutput {
    /// What the model reads.
    pub text: RString,
    /// The structured result as JSON text (`null` if none); the client receives it as the
    /// final card's raw output.
    pub raw_output: RString,
    /// Fields added in 1.x.
    pub extensions: Extensions,
}

impl ToolOutput {
    /// An output of `text` for the model and `raw_output` for the client.
    pub fn new(text: impl Into<String>, raw_output: &serde_json::Value) -> Self {
        Self::from_json_text(text, raw_output.to_string())
    }

    /// An output whose raw output is JSON text already (as the host hands it back).
    pub fn from_json_text(text: impl Into<String>, raw_output: impl Into<String>) -> Self {
        Self {
            text: text.into().into(),
            raw_output: raw_output.into().into(),
            extensions: Extensions::none(),
        }
    }
}

/// How a call is shown to the user. Presentation is pure and display-only: it sees only the
/// call (and result), so the host can rebuild every card from its log.
///
/// Kinds of card may be added in 1.x: the enum is non-exhaustive, and it crosses the boundary
/// as [`Card_NE`] (abi_stable's `NonExhaustive` wrapper, with room for larger variants), into
/// which [`export_plugin!`](crate::export_plugin) puts what a plugin returns. A host that
/// does not know a plugin's kind of card draws a plain card titled with the tool's name.
#[repr(u8)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
#[sabi(kind(WithNonExhaustive(size = [usize; 48], traits(Debug, Clone, PartialEq))))]
#[non_exhaustive]
pub enum Card {
    /// A live terminal labelled with the exact command; the host streams the command's output
    /// into it and closes it with the exit status.
    Terminal(TerminalCard),
    /// Anything else: a title, a kind and optional markdown content.
    Generic(GenericCard),
}

impl Card {
    /// The card as it crosses the boundary.
    pub fn into_abi(self) -> Card_NE {
        Card_NE::new(self)
    }
}

/// The card of a command: a terminal the client labels with the command.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TerminalCard {
    /// The exact command line, shown as the card's title.
    pub command: RString,
    /// What the command does, in a few words (the model's `description`), shown with it.
    pub description: ROption<RString>,
    /// Absolute directory the command runs in.
    pub cwd: RString,
    /// How the command ended; `None` while it runs.
    pub exit: ROption<TerminalExit>,
    /// Fields added in 1.x.
    pub extensions: Extensions,
}

impl TerminalCard {
    /// The card of `command` running in `cwd`, without a description.
    pub fn new(command: &str, cwd: &str) -> Self {
        Self {
            command: command.into(),
            description: ROption::RNone,
            cwd: cwd.into(),
            exit: ROption::RNone,
            extensions: Extensions::none(),
        }
    }

    /// With a few words on what the command does.
    #[must_use]
    pub fn with_description(mut self, description: Option<&str>) -> Self {
        self.description = description.map(RString::from).into();
        self
    }

    /// As the command ended.
    #[must_use]
    pub fn with_exit(mut self, exit: TerminalExit) -> Self {
        self.exit = ROption::RSome(exit);
        self
    }
}

/// How a terminal card's command ended.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TerminalExit {
    /// The exit code; `None` when a signal ended it.
    pub exit_code: ROption<i32>,
    /// Signal name such as `SIGKILL`, when a signal ended the command.
    pub signal: ROption<RString>,
    /// Fields added in 1.x.
    pub extensions: Extensions,
}

impl TerminalExit {
    /// An end with `exit_code`, or by `signal` (either may be absent).
    pub fn new(exit_code: Option<i32>, signal: Option<&str>) -> Self {
        Self {
            exit_code: exit_code.into(),
            signal: signal.map(RString::from).into(),
            extensions: Extensions::none(),
        }
    }
}

/// The card of anything that is not a command.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
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
    /// Fields added in 1.x.
    pub extensions: Extensions,
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
            extensions: Extensions::none(),
        }
    }

    /// With markdown in its body.
    #[must_use]
    pub fn with_content(mut self, content: impl Into<String>) -> Self {
        self.content = ROption::RSome(content.into().into());
        self
    }

    /// With one more place in a file.
    #[must_use]
    pub fn with_location(mut self, location: Location) -> Self {
        self.locations.push(location);
        self
    }

    /// With one more change to a file.
    #[must_use]
    pub fn with_diff(mut self, diff: Diff) -> Self {
        self.diffs.push(diff);
        self
    }
}

/// A place in a file.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Location {
    /// Absolute path.
    pub path: RString,
    /// 1-based line, when the call is about one place in the file.
    pub line: ROption<u32>,
    /// Fields added in 1.x.
    pub extensions: Extensions,
}

impl Location {
    /// `path`, at `line` if the call is about one place in it.
    pub fn new(path: &str, line: Option<u32>) -> Self {
        Self { path: path.into(), line: line.into(), extensions: Extensions::none() }
    }
}

/// A change to one file.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Diff {
    /// Absolute path.
    pub path: RString,
    /// The text before the change; `None` for a new file.
    pub old_text: ROption<RString>,
    /// The text after the change.
    pub new_text: RString,
    /// Fields added in 1.x.
    pub extensions: Extensions,
}

impl Diff {
    /// The change of `path` from `old_text` (`None`: a new file) to `new_text`.
    pub fn new(path: &str, old_text: Option<&str>, new_text: &str) -> Self {
        Self {
            path: path.into(),
            old_text: old_text.map(RString::from).into(),
            new_text: new_text.into(),
            extensions: Extensions::none(),
        }
    }
}

open_enum! {
    /// The category of a tool call, mirrored by the client's icon. A host shows a kind it
    /// does not know (from a later 1.x) as `Other`.
    pub struct ToolKind;
    default = Other;
    /// Reads files or state.
    Read = 0, "read";
    /// Changes a file.
    Edit = 1, "edit";
    /// Removes something.
    Delete = 2, "delete";
    /// Moves or renames something.
    Move = 3, "move";
    /// Searches.
    Search = 4, "search";
    /// Runs a command.
    Execute = 5, "execute";
    /// Thinks or plans, touching nothing.
    Think = 6, "think";
    /// Fetches from the network.
    Fetch = 7, "fetch";
    /// Anything else.
    Other = 8, "other";
}

/// The card of a finished call and how it is shown.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct FinalCard {
    /// The card as the call ended.
    pub card: Card_NE,
    /// How the call ended, as the card shows it.
    pub status: CardStatus,
    /// Fields added in 1.x.
    pub extensions: Extensions,
}

impl FinalCard {
    /// `card`, shown with `status`.
    pub fn new(card: Card, status: CardStatus) -> Self {
        Self { card: card.into_abi(), status, extensions: Extensions::none() }
    }
}

open_enum! {
    /// How a finished call's card is shown. A host shows a status it does not know (from a
    /// later 1.x) as `Completed`.
    pub struct CardStatus;
    default = Completed;
    /// The call did what it was asked.
    Completed = 0, "completed";
    /// The call failed (the model read an error).
    Failed = 1, "failed";
    /// The call started a background task: the card stays open, and the host closes it with
    /// the task's outcome when the task ends.
    Running = 2, "running";
}

/// What the host tells a plugin when it asks for its tools and prompt sections.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ToolsContext {
    /// The executor confines commands to sandbox modes: a tool that runs commands may offer
    /// escalation ([`CommandSpec::sandbox_permissions`]) and explain denials.
    pub sandboxed: bool,
    /// Fields added in 1.x.
    pub extensions: Extensions,
}

impl ToolsContext {
    /// The context of a host whose executor does (or does not) confine commands.
    pub fn new(sandboxed: bool) -> Self {
        Self { sandboxed, extensions: Extensions::none() }
    }
}

open_enum! {
    /// The sandbox modes, narrowest first (the order is part of the contract, and a mode
    /// added in 1.x is placed by its number). A host refuses a request for a mode it does not
    /// know; a plugin told of one describes it as `unknown`.
    #[derive(PartialOrd, Ord)]
    pub struct SandboxMode;
    default = ReadOnly;
    /// No writes anywhere, no network.
    ReadOnly = 0, "read-only";
    /// Writes only under the session's cwd and `$TMPDIR` (the cwd's `.git` stays read-only);
    /// no network unless the host's configuration allows it.
    WorkspaceWrite = 1, "workspace-write";
    /// Unconfined.
    DangerFullAccess = 2, "danger-full-access";
}

/// A wider mode for one command, which the host grants only if the user allows it.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SandboxRequest {
    /// The mode wanted.
    pub mode: SandboxMode,
    /// Why, in the model's words; shown to the user with the exact command.
    pub justification: RString,
    /// Fields added in 1.x.
    pub extensions: Extensions,
}

impl SandboxRequest {
    /// A request for `mode`, for the reason given.
    pub fn new(mode: SandboxMode, justification: &str) -> Self {
        Self { mode, justification: justification.into(), extensions: Extensions::none() }
    }
}

/// A command for the host's bash executor.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
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
    /// Fields added in 1.x.
    pub extensions: Extensions,
}

impl CommandSpec {
    /// `command` run by bash in `workdir`, with the default timeout, under the session's mode.
    pub fn new(command: &str, workdir: &str) -> Self {
        Self {
            command: command.into(),
            workdir: workdir.into(),
            timeout_ms: ROption::RNone,
            sandbox_permissions: ROption::RNone,
            extensions: Extensions::none(),
        }
    }

    /// With a timeout (`None`: the executor's default).
    #[must_use]
    pub fn with_timeout_ms(mut self, timeout_ms: Option<u64>) -> Self {
        self.timeout_ms = timeout_ms.into();
        self
    }

    /// Under a wider mode, if the user allows it (`None`: the session's mode).
    #[must_use]
    pub fn with_sandbox_permissions(mut self, request: Option<SandboxRequest>) -> Self {
        self.sandbox_permissions = request.into();
        self
    }

    /// What the command reads on stdin (added in 1.1); `None`: nothing (`/dev/null`), which
    /// is also what a 1.0 host gives it.
    pub fn stdin(&self) -> Option<String> {
        self.extensions.get("stdin")
    }

    /// With `stdin` fed to the command (added in 1.1). A command that does not read it all
    /// is not waited for. A 1.0 host ignores it.
    #[must_use]
    pub fn with_stdin(mut self, stdin: &str) -> Self {
        self.extensions.set("stdin", stdin);
        self
    }

    /// Variables set on top of the command's environment (added in 1.1); none from a 1.0
    /// plugin.
    pub fn env(&self) -> Vec<(String, String)> {
        self.extensions.get("env").unwrap_or_default()
    }

    /// With these variables set on top of the command's environment (added in 1.1; after
    /// the host's credential scrub). A 1.0 host ignores them.
    #[must_use]
    pub fn with_env(mut self, env: &[(&str, &str)]) -> Self {
        let env: Vec<(&str, &str)> = env.to_vec();
        self.extensions.set("env", env);
        self
    }
}

/// How the sandbox treated a command.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
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
    /// Fields added in 1.x.
    pub extensions: Extensions,
}

/// How a foreground command ended. A non-zero exit, a timeout or an abort are outcomes, not
/// errors: only an infrastructure failure (bad workdir, no shell) is an error.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
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
    /// Fields added in 1.x.
    pub extensions: Extensions,
}

/// A background task as the host reports it.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TaskStatus {
    /// Running, or how it ended.
    pub state: TaskState,
    /// Set once the task has exited normally.
    pub exit_code: ROption<i32>,
    /// Name of the signal that ended the task, e.g. `SIGTERM`.
    pub signal: ROption<RString>,
    /// Fields added in 1.x.
    pub extensions: Extensions,
}

open_enum! {
    /// Where a background task is in its life. A plugin told of a state it does not know
    /// (from a later 1.x) should treat it as ended.
    pub struct TaskState;
    default = Running;
    /// It runs.
    Running = 0, "running";
    /// Ended on its own (see the exit code or signal).
    Exited = 1, "exited";
    /// Ended because it was killed (`kill`, or the host shutting down).
    Killed = 2, "killed";
}

/// A background task that was just started.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TaskStarted {
    /// `<tool>-N`: the name of the tool whose call started it and a number unique within the
    /// host process (`bash-3`).
    pub task_id: RString,
    /// The file that receives the task's full output.
    pub output_path: RString,
    /// Fields added in 1.x.
    pub extensions: Extensions,
}

/// Output produced since the previous read (each byte is delivered once).
#[repr(C)]
#[derive(StableAbi, Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
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
    /// Fields added in 1.x.
    pub extensions: Extensions,
}

/// What a kill did.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct KillOutcome {
    /// False when the task had already ended: nothing was killed.
    pub killed: bool,
    /// The task's final status.
    pub status: TaskStatus,
    /// Fields added in 1.x.
    pub extensions: Extensions,
}

open_enum! {
    /// How important a plugin's log line is (the host's log level filters it). A host logs a
    /// level it does not know (from a later 1.x) as `Info`.
    pub struct LogLevel;
    default = Info;
    /// Something failed.
    Error = 0, "error";
    /// Something is wrong but the call goes on.
    Warn = 1, "warn";
    /// Worth knowing.
    Info = 2, "info";
    /// Detail for debugging.
    Debug = 3, "debug";
}

/// What the host offers a plugin during one call. The object is bound to that call: output of
/// a command it runs streams into the call's card, and cancelling the turn aborts it.
///
/// Methods block until the host has answered; plugin calls run on a host thread made for
/// blocking. A service added in 1.x comes after the last one here, with a default body that
/// answers as a host without it would (an error naming the service), which is what a plugin
/// gets from an older host.
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
#[non_exhaustive]
pub struct FileRead {
    /// Absolute, or relative to the session's cwd.
    pub path: RString,
    /// The model sees this text: the host remembers it, so a later write can tell whether the
    /// file changed since (see [`FileText::seen`]).
    pub remember: bool,
    /// Fields added in 1.x.
    pub extensions: Extensions,
}

impl FileRead {
    /// A read of `path`, remembered as what the model saw of it (or not).
    pub fn new(path: &str, remember: bool) -> Self {
        Self { path: path.into(), remember, extensions: Extensions::none() }
    }
}

/// A text file as read.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
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
    /// Fields added in 1.x.
    pub extensions: Extensions,
}

open_enum! {
    /// Whether the model has seen a file's current text. A plugin told of a value it does not
    /// know (from a later 1.x) should treat it as `Changed`.
    pub struct Seen;
    default = Never;
    /// The model never read (or wrote) the file in this session.
    Never = 0, "never";
    /// The model's last read or write of the file left exactly this text.
    Same = 1, "same";
    /// The file changed (on disk or in the buffer) since the model last read or wrote it.
    Changed = 2, "changed";
}

/// A write of a whole text file.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
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
    /// Fields added in 1.x.
    pub extensions: Extensions,
}

impl FileWrite {
    /// A write of `text` to `path`, whatever the file holds now.
    pub fn new(path: &str, text: &str) -> Self {
        Self {
            path: path.into(),
            text: text.into(),
            expected: ROption::RNone,
            sandbox_permissions: ROption::RNone,
            extensions: Extensions::none(),
        }
    }

    /// Written only if the file still holds `expected` (`None`: no such check).
    #[must_use]
    pub fn expecting(mut self, expected: Option<&str>) -> Self {
        self.expected = expected.map(RString::from).into();
        self
    }

    /// Under a wider mode, if the user allows it (`None`: the session's mode).
    #[must_use]
    pub fn with_sandbox_permissions(mut self, request: Option<SandboxRequest>) -> Self {
        self.sandbox_permissions = request.into();
        self
    }
}

/// What a write did.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
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
    /// Fields added in 1.x.
    pub extensions: Extensions,
}

/// The host services as a plugin receives them: borrowed for the duration of one call.
pub type HostRef<'a> = HostServices_TO<'a, abi_stable::sabi_types::RRef<'a, ()>>;

/// The owned form, for hosts and tests that build a services object.
pub type HostBox = HostServices_TO<'static, RBox<()>>;

/// A hook a plugin declares (added in 1.1): an event of a session, in Claude Code's names
/// (`PreToolUse`, `PostToolUse`, `UserPromptSubmit`, `Stop`, `SessionStart`, `PreCompact`,
/// `SessionEnd`, `Notification`), and a matcher with Claude Code's rules (empty or `*`: every
/// run; `Bash`, `Edit|Write`: those tools, as hooks name them; anything else a regular
/// expression). The host calls [`Plugin::run_hook`] at each run of the event that matches.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HookSpec {
    /// The event, as Claude Code names it.
    pub event: RString,
    /// Which runs of the event (see above).
    pub matcher: RString,
    /// Fields added in 1.x.
    pub extensions: Extensions,
}

impl HookSpec {
    /// A hook on `event`'s runs that `matcher` selects.
    pub fn new(event: &str, matcher: &str) -> Self {
        Self { event: event.into(), matcher: matcher.into(), extensions: Extensions::none() }
    }
}

/// One run of a plugin's hook (added in 1.1).
#[repr(C)]
#[derive(StableAbi, Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct HookCall {
    /// The event, as Claude Code names it.
    pub event: RString,
    /// The JSON a command hook would read on stdin, with Claude Code's fields (`session_id`,
    /// `cwd`, `hook_event_name`, `tool_name`, `tool_input`, `tool_response`, `prompt`…).
    pub payload: RString,
    /// Fields added in 1.x.
    pub extensions: Extensions,
}

impl HookCall {
    /// A run of `event` with `payload` (tests of a plugin make their own).
    pub fn new(event: &str, payload: &serde_json::Value) -> Self {
        Self { event: event.into(), payload: payload.to_string().into(), ..Self::default() }
    }

    /// The payload, parsed (`Null` when it is not JSON).
    pub fn payload(&self) -> serde_json::Value {
        serde_json::from_str(&self.payload).unwrap_or_default()
    }
}

/// What a plugin's hook answers (added in 1.1): Claude Code's hook output, the JSON a
/// command hook prints on stdout (`hookSpecificOutput` with `permissionDecision`,
/// `permissionDecisionReason`, `updatedInput`, `additionalContext`; `decision` and `reason`;
/// `continue`, `stopReason`, `systemMessage`), so a plugin's hook means what a command
/// hook's output means. Made with the constructors.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct HookAnswer {
    /// The output as JSON text (empty: nothing to say).
    pub output: RString,
    /// Fields added in 1.x.
    pub extensions: Extensions,
}

impl HookAnswer {
    /// Nothing to say: the session goes on as without the hook.
    pub fn none() -> Self {
        Self::default()
    }

    /// Claude Code's hook output `output`, as it is.
    pub fn json(output: &serde_json::Value) -> Self {
        Self { output: output.to_string().into(), extensions: Extensions::none() }
    }

    fn decision(event: &str, decision: &str, reason: &str) -> Self {
        Self::json(&serde_json::json!({"hookSpecificOutput": {
            "hookEventName": event,
            "permissionDecision": decision,
            "permissionDecisionReason": reason,
        }}))
    }

    /// `PreToolUse`: the call may run (the hook does not object; it widens no sandbox).
    pub fn allow(reason: &str) -> Self {
        Self::decision("PreToolUse", "allow", reason)
    }

    /// `PreToolUse`: the call does not run; the model reads `reason`.
    pub fn deny(reason: &str) -> Self {
        Self::decision("PreToolUse", "deny", reason)
    }

    /// `PreToolUse`: the user is asked first, reading `reason`.
    pub fn ask(reason: &str) -> Self {
        Self::decision("PreToolUse", "ask", reason)
    }

    /// `PreToolUse`: the call runs with these arguments instead (as hooks see them:
    /// `command`, `file_path`).
    pub fn rewrite(input: &serde_json::Value) -> Self {
        Self::json(&serde_json::json!({"hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "allow",
            "updatedInput": input,
        }}))
    }

    /// `PostToolUse`, `UserPromptSubmit`, `SessionStart`: `text` for the model's context.
    pub fn add_context(event: &str, text: &str) -> Self {
        Self::json(&serde_json::json!({"hookSpecificOutput": {
            "hookEventName": event,
            "additionalContext": text,
        }}))
    }

    /// `UserPromptSubmit`: the prompt is not answered; `Stop`: the model goes on;
    /// `PostToolUse`: the model reads `reason`.
    pub fn block(reason: &str) -> Self {
        Self::json(&serde_json::json!({"decision": "block", "reason": reason}))
    }
}

/// The table of functions a plugin exports. Built by [`export_plugin!`](crate::export_plugin);
/// never written by hand. A function added in 1.x comes after `shutdown`: the host reads it as
/// absent from an older plugin's table and does without.
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
    pub present_call: extern "C" fn(&ToolCall) -> RResult<Card_NE, RString>,
    /// The card of a call as it ended, and its status (pure: it sees the call and its output).
    pub present_result: extern "C" fn(&ToolCall, &ToolOutput) -> RResult<FinalCard, RString>,
    /// Called once when the host replaces or drops this generation of the plugin.
    #[sabi(last_prefix_field)]
    pub shutdown: extern "C" fn() -> RResult<(), RString>,
    /// The hooks the plugin declares, in the context the host gives (added in 1.1; a 1.0
    /// plugin declares none).
    pub hooks: extern "C" fn(&ToolsContext) -> RResult<RVec<HookSpec>, RString>,
    /// Runs one of its hooks, with the host services bound to the session (added in 1.1).
    pub run_hook: extern "C" fn(&HookCall, HostRef<'_>) -> RResult<HookAnswer, RString>,
}

impl RootModule for PluginModuleRef {
    declare_root_module_statics! {PluginModuleRef}
    const BASE_NAME: &'static str = "hotsh_plugin";
    const NAME: &'static str = "hotsh_plugin";
    /// The interface version a plugin declares: this crate's.
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
    /// The hooks the plugin declares (added in 1.1; none by default). They are reloaded with
    /// the plugin, as its tools are.
    fn hooks(context: &ToolsContext) -> Vec<HookSpec> {
        let _ = context;
        Vec::new()
    }
    /// Runs one of its hooks (added in 1.1). `Err` is a hook that failed: the user sees it
    /// on the hook's card, and the session goes on as without it.
    fn run_hook(call: &HookCall, host: &HostRef<'_>) -> Result<HookAnswer, String> {
        let _ = (call, host);
        Ok(HookAnswer::none())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_from_a_later_minor_version_reads_as_unknown_and_falls_back_where_documented() {
        let later = ToolKind(42);
        assert!(!later.is_known());
        assert_eq!(later.as_str(), "unknown");
        assert_eq!(format!("{later:?}"), "ToolKind(42)");
        assert_eq!(format!("{:?}", ToolKind::Edit), "edit");
        assert_eq!(ToolKind::parse("search"), Some(ToolKind::Search));
        assert_eq!(ToolKind::parse("unknown"), None);
        assert!(SandboxMode::ReadOnly < SandboxMode::WorkspaceWrite);
        assert!(SandboxMode::WorkspaceWrite < SandboxMode::DangerFullAccess);
    }

    #[test]
    fn extensions_read_what_was_set_and_treat_anything_else_as_absent() {
        let mut extensions = Extensions::none();
        assert!(extensions.is_empty());
        assert_eq!(extensions.get::<u32>("width"), None);
        extensions.set("width", 80);
        extensions.set("label", "wide");
        assert_eq!(extensions.get::<u32>("width"), Some(80));
        assert_eq!(extensions.get::<u32>("label"), None, "not a number: absent");
        let mut names = extensions.names();
        names.sort();
        assert_eq!(names, ["label", "width"]);
        let garbage = Extensions(RString::from("{not json"));
        assert_eq!(garbage.get::<u32>("width"), None);
        assert!(garbage.names().is_empty());
    }

    #[test]
    fn export_name_matches_abi_stable() {
        assert_eq!(
            abi_stable::library::ROOT_MODULE_LOADER_NAME,
            "_1as_0lib_1header_0root_bmodule_bloader"
        );
    }
}
