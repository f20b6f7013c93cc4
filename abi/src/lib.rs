//! The stable ABI between the `dsh` host and its cdylib plugins.
//!
//! This is the only crate both sides link. Everything that crosses the boundary is an
//! `abi_stable` type: the root module ([`PluginModule`], a prefix type that can grow by appending
//! fields), the plugin instance and checker trait objects, the host context trait object, and the
//! plain data types of [`types`].
//!
//! Plugin authors do not implement the FFI traits directly: they implement the ordinary Rust
//! traits [`Plugin`] and [`Checker`] and export them with [`export_plugin!`], which wraps every
//! entry point in `catch_unwind` so a panic inside a plugin becomes an error value instead of
//! aborting the host (abi_stable aborts the process when a panic crosses the boundary).
//!
//! The [`js`] module holds the JSON helpers both sides need to write records the way the
//! TypeScript reference writes them (JavaScript number formatting, key order preserved); the
//! [`retry`] module holds the retry maths every executor needs (timer cap, jittered backoff,
//! chain position, sorted codes) and the check the host applies to every retry decision; the
//! [`store`] module holds what a counter store does to a counter or a circuit, for the host's
//! stores and the author kit's fake host alike.

// `#[sabi_trait]` expands to impl blocks inside a generated constant.
#![allow(non_local_definitions)]

pub mod breaker;
pub mod config;
pub mod context;
pub mod events;
pub mod ffi;
pub mod host;
pub mod instance;
pub mod js;
pub mod js_value;
pub mod module;
pub mod plugin;
pub mod record;
pub mod retry;
pub mod store;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod types;

pub use config::{Key, Kind, Row, Schema};
pub use host::{HostContext, HostContextRef, HostContext_TO};
pub use instance::{
    CheckerObject, PluginInstance, PluginInstanceObject, PluginInstance_TO, SessionChecker, SessionChecker_TO,
};
pub use module::{PluginModule, PluginModuleRef};
pub use plugin::{Checker, OncePerTurn, Plugin};
pub use record::{PolicyKey, RetryRecord};
pub use types::*;

/// The FFI-safe standard types the interface uses, so a plugin needs no direct `abi_stable`
/// dependency.
pub use abi_stable::std_types::{RBox, ROption, RResult, RSlice, RStr, RString, RVec};

/// Re-exports used by [`export_plugin!`]; not part of the public surface.
#[doc(hidden)]
pub mod reexports {
    pub use abi_stable;
}

/// The version of this interface. A host refuses a plugin whose manifest names another one, in
/// addition to abi_stable's own layout check.
pub const ABI_VERSION: u32 = 2;

#[cfg(test)]
mod tests {
    #[test]
    fn export_plugin_declares_the_header_abi_stable_loads() {
        assert_eq!(abi_stable::library::ROOT_MODULE_LOADER_NAME, "_1as_0lib_1header_0root_bmodule_bloader");
    }
}
