//! The agent: its row config ([`config`]), the assembly of a composed profile into running parts
//! ([`assembly`]), sessions set up new, continued or resumed ([`session`]) with what they run
//! with ([`target`]), the turn loop
//! ([`turn`]) with its tool calls ([`tool_calls`]) and, inside it, the retry step — where a retry record is written and where the
//! wait happens ([`retry`]); and what is asked of an assembly without running it: who handles
//! each failure ([`explain`]), settings that do nothing ([`lint`]), and recorded failures run
//! through it on a virtual clock ([`replay`]).

pub mod assembly;
pub mod cancel;
pub mod config;
pub mod explain;
pub mod lint;
pub mod replay;
pub mod retry;
pub mod route;
pub mod session;
pub mod target;
mod tool_calls;
pub mod turn;
pub mod view;

pub use assembly::Assembly;
pub use cancel::Cancel;
pub use route::Route;
