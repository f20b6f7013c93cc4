//! Plugin libraries: opening them through the stable ABI ([`loader`]), inspecting them in a
//! child process so a crashing library cannot take the host down ([`inspect`]), and the
//! instances that serve configured rows ([`instance`]).

pub mod inspect;
pub mod instance;
pub mod loader;

pub use instance::RowInstance;
pub use loader::{InstantiateFailure, LoadError, PluginLibrary};
