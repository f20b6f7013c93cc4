//! A fork's inherited cut, as 0.2's reader finds it when it decodes a v4 log: a header saying
//! `isSeeded: true` needs a `session/end-seed` `{"inherited": true}` somewhere in the log (its
//! last one marks the cut), and an unseeded log may hold none.

use serde_json::Value;

pub(crate) const UNMARKED_SEEDED: &str = "released v2 seeded Session lacks an inherited end-seed marker";
pub(super) const MARKED_UNSEEDED: &str = "released v2 unseeded Session contains an inherited end-seed marker";

/// The rule that a seeded log marks its inherited cut and an unseeded one does not: what the
/// log said of it so far.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct InheritedMarkerRule {
    /// The header's `isSeeded`.
    pub seeded: bool,
    /// Whether an inherited marker was seen.
    pub marked: bool,
}

impl InheritedMarkerRule {
    /// Takes in a `session/end-seed`'s data; the first inherited marker of an unseeded log is
    /// reported (the reference names the log once).
    pub fn end_seed(&mut self, data: &Value, violations: &mut dyn FnMut(String)) {
        if data.get("inherited") != Some(&Value::Bool(true)) {
            return;
        }
        if !self.seeded && !self.marked {
            violations(MARKED_UNSEEDED.to_owned());
        }
        self.marked = true;
    }

    /// Once the whole log is read: a seeded header without its marker.
    pub fn finish(&self, violations: &mut dyn FnMut(String)) {
        if self.seeded && !self.marked {
            violations(UNMARKED_SEEDED.to_owned());
        }
    }
}
