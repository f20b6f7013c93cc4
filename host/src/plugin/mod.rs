//! Plugin packages and libraries: where a row's package comes from ([`catalog`]), opening
//! libraries through the stable ABI ([`loader`]), inspecting them in a child process so a
//! crashing library cannot take the host down ([`inspect`]), installing and removing packages
//! ([`install`]), what a profile's packages are ([`listing`]), the instances that serve rows
//! ([`instance`]), and new plugin crates ([`template`]).

pub mod catalog;
pub mod inspect;
pub mod install;
pub mod instance;
pub mod listing;
pub mod loader;
pub mod template;

pub use instance::RowInstance;
pub use loader::{InstantiateFailure, LoadError, PluginLibrary};
