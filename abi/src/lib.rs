//! The stable plugin interface of hotsh: the only crate a hotsh plugin depends on.
//!
//! A plugin is a `cdylib` that implements [`Plugin`] on a unit type and exports it with
//! [`export_plugin!`]. The host loads the library, checks that its interface is one the host
//! speaks (the same major version, and layouts that differ only by what the newer side
//! appended: see [`load`]), and then calls the plugin through the [`v1`] module of
//! `extern "C"` functions.
//!
//! Two rules make a plugin safe to load into a long-running host:
//!
//! - **Plugins are stateless request handlers.** No threads, no runtimes, no globals that
//!   must survive a reload: the host may load a new build at any moment and never unloads an
//!   old one. Everything long-lived (processes, background tasks, logs) belongs to the host
//!   and is reached through the [`HostRef`] handed to [`Plugin::invoke`].
//! - **A panic never crosses the boundary.** A plugin carries its own copy of `std`, so the
//!   host cannot catch its panics. [`export_plugin!`] wraps every exported function in
//!   `catch_unwind` and turns a panic into an error value; there is no way to export a
//!   function without that guard.
//!
//! # Stability
//!
//! This is hotsh-abi 1: depend on `hotsh-abi = "1"`. A plugin built against any 1.x loads in
//! every hotsh that speaks 1.x, older or newer than the plugin's. The rule that makes it so:
//! **after 1.0, only append.**
//!
//! - A function of the plugin module is added after the last one ([`PluginModule::run_hook`]
//!   since 1.1),
//!   a host service after the last one ([`HostServices::write_text_file`]); a host reads the
//!   function as absent from an older plugin and does without, a plugin calling a service an
//!   older host lacks gets the service's default answer.
//! - A value of a field-less type ([`ToolKind`], [`CardStatus`], [`SandboxMode`],
//!   [`TaskState`], [`Seen`], [`LogLevel`]) is a new constant; each type's documentation says
//!   what a receiver that does not know the value does (a tool kind shows as `Other`, a card
//!   status as `Completed`, a sandbox mode is refused). A flag of [`ToolEffects`] likewise.
//! - A kind of card is a new variant of [`Card`] (non-exhaustive, with room reserved); a host
//!   that does not know it draws a plain card titled with the tool's name.
//! - A field of a record is a typed accessor over the record's [`Extensions`]; absent from an
//!   older sender's record, it reads as absent, and the accessor says what that means.
//!
//! Nothing is removed, renamed or reordered, and no layout changes within 1.x: abi_stable
//! checks every type that crosses the boundary when a library is loaded ([`load`] applies the
//! rule in both directions), so a build that breaks the rule is refused, never misread. Records
//! are `#[non_exhaustive]` and made with constructors and builders, so an addition breaks no
//! plugin's code either. Whatever cannot be done by appending is a 2.0, with its own module
//! beside [`v1`], and hosts keep loading 1.x plugins through the old one. A build for another
//! major version is refused, naming both versions and what to do, and the previous build of
//! the plugin keeps serving. `hotsh plugin check PATH` names the version a build was made for
//! and whether this hotsh loads it. [`VERSION`] is this crate's version.

#![warn(missing_docs)]

pub mod load;
pub mod v1;

mod sandbox;

#[doc(hidden)]
pub mod __private;

pub use abi_stable::std_types::{ROption, RResult, RStr, RString, RVec};
pub use v1::{
    Card, Card_NE, CardStatus, CommandOutcome, CommandSpec, Diff, Extensions, FileRead, FileText,
    FileWrite, FileWritten, FinalCard, GenericCard, HookAnswer, HookCall, HookSpec, HostRef,
    HostServices, HostServices_TO, KillOutcome, Location, LogLevel, Manifest, Plugin, PluginModule,
    PluginModuleRef, PromptSection, SandboxFacts, SandboxMode, SandboxRequest, Seen, TaskOutput,
    TaskStarted, TaskState, TaskStatus, TerminalCard, TerminalExit, ToolCall, ToolEffects,
    ToolKind, ToolOutput, ToolSpec, ToolsContext,
};

/// The interface version a plugin built against this crate speaks: this crate's version,
/// which the host reads from a plugin's library header and compares with its own.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Exports `$plugin` (a type implementing [`Plugin`]) as this library's hotsh plugin.
///
/// Use it exactly once, at the root of a `cdylib` crate. A complete plugin with one tool:
///
/// ```
/// use hotsh_abi::{
///     Card, CardStatus, FinalCard, GenericCard, HostRef, Manifest, Plugin, ToolCall, ToolKind,
///     ToolOutput, ToolSpec,
/// };
///
/// struct Echo;
///
/// impl Plugin for Echo {
///     fn manifest() -> Manifest {
///         Manifest::new("echo", "0.1.0")
///     }
///
///     fn tools() -> Vec<ToolSpec> {
///         let schema = serde_json::json!({
///             "type": "object",
///             "properties": {"text": {"type": "string"}},
///             "required": ["text"]
///         });
///         vec![ToolSpec::new("echo", "Says the text back.", &schema)]
///     }
///
///     fn invoke(call: &ToolCall, _host: &HostRef<'_>) -> Result<ToolOutput, String> {
///         #[derive(serde::Deserialize)]
///         struct Args {
///             text: String,
///         }
///         let args: Args = call.arguments()?;
///         Ok(ToolOutput::new(args.text.clone(), &serde_json::json!({ "echoed": args.text })))
///     }
///
///     fn present_call(_call: &ToolCall) -> Result<Card, String> {
///         Ok(Card::Generic(GenericCard::new("Echo", ToolKind::Other, None)))
///     }
///
///     fn present_result(_call: &ToolCall, output: &ToolOutput) -> Result<FinalCard, String> {
///         let card = GenericCard::new("Echo", ToolKind::Other, None).with_content(&*output.text);
///         Ok(FinalCard::new(Card::Generic(card), CardStatus::Completed))
///     }
/// }
///
/// hotsh_abi::export_plugin!(Echo);
/// # fn main() {}
/// ```
///
/// Every function it exports runs the plugin's code inside `catch_unwind`, so a panic comes
/// back to the host as an error naming the function, and the host lives on.
#[macro_export]
macro_rules! export_plugin {
    ($plugin:ty) => {
        const _: () = {
            use $crate::__private::{RResult, RString, RVec, guard};
            use $crate::v1::{
                Card_NE, FinalCard, HostRef, Manifest, PluginModule, PluginModuleRef,
                PromptSection, ToolCall, ToolOutput, ToolSpec, ToolsContext,
            };

            extern "C" fn manifest() -> RResult<Manifest, RString> {
                guard("manifest", || Ok(<$plugin as $crate::Plugin>::manifest()))
            }
            extern "C" fn tools(context: &ToolsContext) -> RResult<RVec<ToolSpec>, RString> {
                guard("tools", || Ok(<$plugin as $crate::Plugin>::tools_in(context).into()))
            }
            extern "C" fn prompt_sections(
                context: &ToolsContext,
            ) -> RResult<RVec<PromptSection>, RString> {
                guard("prompt_sections", || {
                    Ok(<$plugin as $crate::Plugin>::prompt_sections_in(context).into())
                })
            }
            extern "C" fn invoke(
                call: &ToolCall,
                host: HostRef<'_>,
            ) -> RResult<ToolOutput, RString> {
                guard("invoke", || <$plugin as $crate::Plugin>::invoke(call, &host))
            }
            extern "C" fn present_call(call: &ToolCall) -> RResult<Card_NE, RString> {
                guard("present_call", || {
                    <$plugin as $crate::Plugin>::present_call(call).map($crate::Card::into_abi)
                })
            }
            extern "C" fn present_result(
                call: &ToolCall,
                output: &ToolOutput,
            ) -> RResult<FinalCard, RString> {
                guard("present_result", || {
                    <$plugin as $crate::Plugin>::present_result(call, output)
                })
            }
            extern "C" fn shutdown() -> RResult<(), RString> {
                guard("shutdown", || {
                    <$plugin as $crate::Plugin>::shutdown();
                    Ok(())
                })
            }
            extern "C" fn hooks(
                context: &ToolsContext,
            ) -> RResult<RVec<$crate::HookSpec>, RString> {
                guard("hooks", || Ok(<$plugin as $crate::Plugin>::hooks(context).into()))
            }
            extern "C" fn run_hook(
                call: &$crate::HookCall,
                host: HostRef<'_>,
            ) -> RResult<$crate::HookAnswer, RString> {
                guard("run_hook", || <$plugin as $crate::Plugin>::run_hook(call, &host))
            }

            fn module() -> PluginModuleRef {
                $crate::__private::leak_module(PluginModule {
                    manifest,
                    tools,
                    prompt_sections,
                    invoke,
                    present_call,
                    present_result,
                    shutdown,
                    hooks,
                    run_hook,
                })
            }

            // abi_stable's loader calls this once per loaded library; it catches a panic in
            // `module()` and reports it as an error value.
            extern "C" fn root_module_loader() -> $crate::__private::RootModuleResult {
                $crate::__private::__call_root_module_loader(module)
            }

            // The symbol abi_stable looks up in a library. Its name is fixed by abi_stable 0.11
            // (a unit test in hotsh-abi checks it against `ROOT_MODULE_LOADER_NAME`).
            #[unsafe(export_name = "_1as_0lib_1header_0root_bmodule_bloader")]
            pub static HOTSH_PLUGIN_ROOT: $crate::__private::LibHeader =
                // SAFETY: `root_module_loader` hands abi_stable the `PluginModuleRef` built
                // by `module()`, as `lib_header` requires.
                unsafe { $crate::__private::lib_header(root_module_loader) };
        };
    };
}
