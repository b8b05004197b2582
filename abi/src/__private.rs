//! Support for [`export_plugin!`](crate::export_plugin); not part of the public interface.

use std::panic::{AssertUnwindSafe, catch_unwind};

pub use abi_stable::library::{
    __call_root_module_loader, CheckTypeLayout, LibHeader, RootModuleResult,
};
pub use abi_stable::std_types::{RResult, RString, RVec};

use crate::v1::{PluginModule, PluginModuleRef};
use abi_stable::prefix_type::PrefixTypeTrait;

/// Runs one exported function's body, turning a panic into an error value that names the
/// function. This is the only way an exported function reaches plugin code.
pub fn guard<T>(function: &str, body: impl FnOnce() -> Result<T, String>) -> RResult<T, RString> {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(value)) => RResult::ROk(value),
        Ok(Err(message)) => RResult::RErr(message.into()),
        Err(payload) => {
            let reason = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a non-string panic payload".to_owned());
            RResult::RErr(format!("plugin panicked in {function}: {reason}").into())
        }
    }
}

/// Moves the module table to the heap for the rest of the process. A module is built once
/// per loaded generation, and generations are never unloaded, so this is not a leak that
/// grows with calls.
pub fn leak_module(module: PluginModule) -> PluginModuleRef {
    module.leak_into_prefix()
}

/// Builds the library header that abi_stable's loader reads.
///
/// # Safety
///
/// `constructor` must return the result of `__call_root_module_loader` on a function that
/// returns a [`PluginModuleRef`]; [`export_plugin!`](crate::export_plugin) guarantees that.
pub const unsafe fn lib_header(constructor: extern "C" fn() -> RootModuleResult) -> LibHeader {
    // SAFETY: forwarded to the caller (see above).
    unsafe { LibHeader::from_constructor::<PluginModuleRef>(constructor, CheckTypeLayout::Yes) }
}
