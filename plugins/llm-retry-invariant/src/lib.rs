//! `llm-retry-invariant`: checks every `llm/retry` and `llm/retry-started` record against the
//! session log before it, in the exact order and with the exact messages of the reference's
//! `./invariant` companion. The host opens one checker per session and feeds it every event: on
//! append (a refused record is not written; the turn ends with code `INVARIANT`) and in
//! `dsh session verify`. Config: `{mode: enforce}` (default) or `{mode: report}` (only log).

pub mod checker;

use dsh_abi::{Checker, ConfigError, EventRef, Hooks, Key, Kind, Manifest, Plugin, Schema, Verdict};
use serde_json::Value;

pub use checker::RetryChecker;

/// `mode`: `enforce` refuses a violating record, `report` only logs it.
pub const SCHEMA: Schema = Schema::plugin(
    "llm-retry-invariant",
    &[Key::new(
        "mode",
        Kind::Choice(&["enforce", "report"]),
        "\"enforce\"",
        "enforce refuses violating records; report only logs them",
    )],
);

pub fn manifest() -> Manifest {
    Manifest::new(
        env!("CARGO_PKG_NAME"),
        env!("CARGO_PKG_VERSION"),
        Hooks::CHECKER,
        "checks every retry record against the session log; refuses bad records on append",
        &SCHEMA,
    )
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Enforce,
    Report,
}

pub struct RetryInvariant {
    mode: Mode,
}

impl RetryInvariant {
    pub fn new(_row_id: &str, config: &Value) -> Result<RetryInvariant, Vec<ConfigError>> {
        let mut row = SCHEMA.read(config)?;
        let mode = match row.text("mode").as_deref() {
            Some("report") => Mode::Report,
            _ => Mode::Enforce,
        };
        row.finish(RetryInvariant { mode })
    }
}

struct SessionChecker {
    mode: Mode,
    state: RetryChecker,
}

impl Checker for SessionChecker {
    fn check_event(&mut self, event: &EventRef<'_>) -> Verdict {
        match self.state.check(event.event_type.as_str(), event.data.as_str()) {
            Ok(()) => Verdict::Accept,
            Err(message) if self.mode == Mode::Enforce => Verdict::Refuse(message.into()),
            Err(message) => Verdict::Warn(message.into()),
        }
    }
}

impl Plugin for RetryInvariant {
    fn open_checker(&self, _header: &str) -> Result<Option<Box<dyn Checker>>, String> {
        Ok(Some(Box::new(SessionChecker { mode: self.mode, state: RetryChecker::default() })))
    }
}

dsh_abi::export_plugin! {
    manifest = manifest,
    instantiate = RetryInvariant::new,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn mode_defaults_to_enforce_and_unknown_keys_are_refused() {
        assert_eq!(RetryInvariant::new("r", &Value::Null).unwrap().mode, Mode::Enforce);
        assert_eq!(RetryInvariant::new("r", &json!({"mode": "report"})).unwrap().mode, Mode::Report);
        let errors = RetryInvariant::new("r", &json!({"mode": "loud", "x": 1})).err().unwrap();
        let paths: Vec<&str> = errors.iter().map(|error| error.path.as_str()).collect();
        assert_eq!(paths, ["x", "mode"]);
    }
}
