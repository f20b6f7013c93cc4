//! The root module every plugin library exports: a prefix type, so later versions of the
//! interface can append fields without breaking libraries built against this one.

use abi_stable::library::RootModule;
use abi_stable::package_version_strings;
use abi_stable::sabi_types::VersionStrings;
use abi_stable::std_types::{RResult, RStr};
use abi_stable::StableAbi;

use crate::instance::PluginInstanceObject;
use crate::types::{InstantiateError, Manifest, PluginError};

#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = PluginModuleRef)))]
#[sabi(missing_field(panic))]
pub struct PluginModule {
    pub manifest: extern "C" fn() -> RResult<Manifest, PluginError>,

    /// Builds the instance for one row from its config (JSON text; `null` when the row has none).
    #[sabi(last_prefix_field)]
    pub instantiate:
        extern "C" fn(row_id: RStr<'_>, config_json: RStr<'_>) -> RResult<PluginInstanceObject, InstantiateError>,

    /// Panics inside the export guard and returns the caught panic as an error: the proof that
    /// the library unwinds. A library built with `panic = "abort"` aborts its process here
    /// instead, which `dsh plugin inspect` sees in its child process. Absent from libraries
    /// built before it was added.
    #[sabi(missing_field(option))]
    pub check_unwinding: extern "C" fn() -> RResult<(), PluginError>,
}

impl RootModule for PluginModuleRef {
    abi_stable::declare_root_module_statics! {PluginModuleRef}

    const BASE_NAME: &'static str = "dsh_plugin";
    const NAME: &'static str = "dsh_plugin";
    const VERSION_STRINGS: VersionStrings = package_version_strings!();
}
