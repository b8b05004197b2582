//! For hosts: the compatibility rule of the interface, applied to a loaded library.
//!
//! abi_stable's own check (`LibHeader::init_root_module`) lets a library be newer than the
//! program that loads it and not older: a loader that knows a later 1.x refuses a plugin built
//! against an earlier one ("too many fields" in its module, "too many variants" in a card).
//! hotsh promises the opposite as well (a plugin built today loads in every later hotsh), so
//! [`plugin_module`] checks the two layouts with the older side as the interface and the newer
//! as its implementation, whichever side that is: the newer side may have appended, the
//! older may not have changed anything.

use crate::v1::PluginModuleRef;
use abi_stable::StableAbi;
use abi_stable::abi_stability::abi_checking::check_layout_compatibility;
use abi_stable::library::{LibHeader, LibraryError, RootModule, RootModuleError};
use abi_stable::sabi_types::VersionNumber;
use abi_stable::std_types::RBoxError;

/// The interface version this crate defines (its own version).
pub fn this_version() -> VersionNumber {
    VersionNumber {
        major: env!("CARGO_PKG_VERSION_MAJOR").parse().unwrap_or(0),
        minor: env!("CARGO_PKG_VERSION_MINOR").parse().unwrap_or(0),
        patch: env!("CARGO_PKG_VERSION_PATCH").parse().unwrap_or(0),
    }
}

/// The interface version the library declares (the hotsh-abi it was built against).
///
/// # Errors
///
/// `LibraryError::ParseVersionError` when the version cannot be read.
pub fn declared_version(header: &LibHeader) -> Result<VersionNumber, LibraryError> {
    VersionNumber::new(header.version_strings()).map_err(LibraryError::ParseVersionError)
}

/// The 1.x module of a plugin library, after checking that it declares interface 1.x (or,
/// before 1.0, the same `0.y`) and that its layout and this crate's differ only by what the
/// newer side appended.
///
/// # Errors
///
/// `IncompatibleVersionNumber` for another major version, `AbiInstability` with abi_stable's
/// report for a layout that differs otherwise, `RootModule` when the plugin's module
/// constructor failed.
pub fn plugin_module(header: &LibHeader) -> Result<PluginModuleRef, LibraryError> {
    let ours = this_version();
    let theirs = declared_version(header)?;
    let same_interface = if ours.major == 0 {
        theirs.major == 0 && theirs.minor == ours.minor
    } else {
        theirs.major == ours.major
    };
    if !same_interface {
        return Err(LibraryError::IncompatibleVersionNumber {
            library_name: PluginModuleRef::NAME,
            expected_version: ours,
            actual_version: theirs,
        });
    }
    // `export_plugin!` always records the layout; a library without it was not built by it.
    let Some(layout) = header.layout() else {
        return Err(LibraryError::InvalidAbiHeader(abi_stable::library::AbiHeader::VALUE));
    };
    let host = <PluginModuleRef as StableAbi>::LAYOUT;
    let (interface, implementation) = if (theirs.minor, theirs.patch) < (ours.minor, ours.patch) {
        (layout, host)
    } else {
        (host, layout)
    };
    check_layout_compatibility(interface, implementation)
        .map_err(|errors| LibraryError::AbiInstability(RBoxError::from_fmt(&errors)))?;
    // SAFETY: the layouts were checked just above, as `check_layout` would.
    unsafe { header.unchecked_layout::<PluginModuleRef>() }
        .map_err(RootModuleError::into_library_error::<PluginModuleRef>)
}
