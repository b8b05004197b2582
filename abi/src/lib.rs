//! The stable plugin interface of hotsh: the only crate a hotsh plugin depends on.
//!
//! A plugin is a `cdylib` that implements [`Plugin`] on a unit type and exports it with
//! [`export_plugin!`]. The host loads the library, checks that its interface layout matches
//! the host's (abi_stable does this), and then calls the plugin through the frozen [`v1`]
//! module of `extern "C"` functions.
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
//! hotsh-abi is not released yet: it is `0.y`, and a plugin must be built against the `0.y`
//! of the hotsh that loads it. abi_stable checks this when the library is loaded, with the
//! layout of every type that crosses the boundary; a build for another `0.y` is refused,
//! saying which side is newer and what to do (update hotsh, or rebuild the plugin), and the
//! previous build of the plugin keeps serving. A change that keeps every layout (a new
//! function or host service after the last one, a documentation change) bumps the patch
//! number only. `hotsh plugin check PATH` names the version a build was made for and whether
//! this hotsh loads it. [`VERSION`] is this crate's version.

#![warn(missing_docs)]

pub mod v1;

mod sandbox;

#[doc(hidden)]
pub mod __private;

pub use abi_stable::std_types::{ROption, RResult, RStr, RString, RVec};
pub use v1::{
    Card, CardStatus, CommandOutcome, CommandSpec, Diff, FileRead, FileText, FileWrite,
    FileWritten, FinalCard, GenericCard, HostRef, HostServices, HostServices_TO, KillOutcome,
    Location, LogLevel, Manifest, Plugin, PluginModule, PluginModuleRef, PromptSection,
    SandboxFacts, SandboxMode, SandboxRequest, Seen, TaskOutput, TaskStarted, TaskState,
    TaskStatus, TerminalCard, TerminalExit, ToolCall, ToolEffects, ToolKind, ToolOutput, ToolSpec,
    ToolsContext,
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
///     Card, CardStatus, FinalCard, GenericCard, HostRef, Manifest, Plugin, ROption, ToolCall,
///     ToolKind, ToolOutput, ToolSpec,
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
///         let mut card = GenericCard::new("Echo", ToolKind::Other, None);
///         card.content = ROption::RSome(output.text.clone());
///         Ok(FinalCard { card: Card::Generic(card), status: CardStatus::Completed })
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
                Card, FinalCard, HostRef, Manifest, PluginModule, PluginModuleRef, PromptSection,
                ToolCall, ToolOutput, ToolSpec, ToolsContext,
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
            extern "C" fn present_call(call: &ToolCall) -> RResult<Card, RString> {
                guard("present_call", || <$plugin as $crate::Plugin>::present_call(call))
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

            fn module() -> PluginModuleRef {
                $crate::__private::leak_module(PluginModule {
                    manifest,
                    tools,
                    prompt_sections,
                    invoke,
                    present_call,
                    present_result,
                    shutdown,
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
