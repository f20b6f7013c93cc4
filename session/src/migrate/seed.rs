//! A forked (seeded) session's inherited cut through the migration, as DeepSeek Harness 0.2
//! carries it: v0 and v1 headers count the events the fork inherited (`seedLength`), v2 on mark
//! the cut with a `session/end-seed {inherited: true}` event under an `isSeeded: true` header.
//!
//! v1→v2 places that marker before the first event made of a source event at or past the cut
//! (a `session/end-seed` right at the cut becomes the marker itself), or at the end when the log
//! holds only inherited events, and refuses a cut through an assistant attempt's chunks. From v2
//! on the marker is the log's own: a seeded log must have one, an unseeded log must not.

use serde_json::{json, Value};

use dsh_abi::events;

/// The inherited cut of one log's migration.
#[derive(Debug)]
pub struct InheritedCut {
    seeded: bool,
    /// The generation the log is in.
    from: u32,
    /// Before v2: how many source events the fork inherited (the header's `seedLength`).
    length: Option<u64>,
    /// Whether the v4 log has its marker.
    marked: bool,
}

impl InheritedCut {
    /// The cut of a log of generation `from` whose header is seeded (with `length`
    /// inherited events before v2) or not.
    pub fn new(from: u32, seeded: bool, length: Option<u64>) -> InheritedCut {
        InheritedCut { seeded, from, length, marked: false }
    }

    /// Before v2, for a v4 event made of the source event at seq `origin` (`event_type`, whose
    /// data is `data`): whether the marker goes right before it. A `session/end-seed` at the
    /// cut becomes the marker.
    pub fn marker_before(&mut self, origin: u64, event_type: &str, data: Option<&mut Value>) -> bool {
        let Some(cut) = self.length.filter(|_| self.seeded) else { return false };
        if origin == cut && event_type == events::SESSION_END_SEED {
            if let Some(data) = data {
                *data = marker_data();
            }
            self.marked = true;
            return false;
        }
        if self.marked || origin < cut {
            return false;
        }
        self.marked = true;
        true
    }

    /// From v2 on, takes in the source's `session/end-seed` `data`; a marker in an unseeded log
    /// is refused.
    pub fn end_seed(&mut self, data: &Value) -> Result<(), String> {
        if self.from < 2 {
            return Ok(());
        }
        match data.get("inherited") {
            None => Ok(()),
            Some(Value::Bool(true)) if self.seeded => {
                self.marked = true;
                Ok(())
            }
            Some(Value::Bool(true)) if self.from == 2 => {
                Err("format v2 unseeded Session contains an inherited end-seed marker".to_owned())
            }
            Some(Value::Bool(true)) => {
                Err("unseeded format v3 Session contains an inherited end-seed marker".to_owned())
            }
            Some(_) => Err("session/end-seed inherited must be true".to_owned()),
        }
    }

    /// Refuses an assistant attempt whose chunks (the first at source seq `first`) the cut
    /// divides from the one at `member`.
    pub fn whole_attempt(&self, first: u64, member: u64) -> Result<(), String> {
        match self.length.filter(|_| self.seeded) {
            Some(cut) if (first < cut) != (member < cut) => {
                Err(format!("inherited Session cut {cut} splits one Assistant attempt"))
            }
            _ => Ok(()),
        }
    }

    /// At the end of a log of `events` source events: whether the marker still goes at its end.
    pub fn finish(&mut self, events: u64) -> Result<bool, String> {
        if let Some(cut) = self.length.filter(|cut| *cut > events) {
            return Err(format!("its seedLength {cut} exceeds its {events} events (Session inheritedEventCount exceeds its event count)"));
        }
        if !self.seeded || self.marked {
            return Ok(false);
        }
        match self.from {
            0 | 1 => {
                self.marked = true;
                Ok(true)
            }
            2 => Err(crate::rules_v4::UNMARKED_SEEDED.to_owned()),
            _ => Err("format v3 seeded Session lacks an accepted inherited end-seed marker".to_owned()),
        }
    }
}

/// The data of the inherited cut's `session/end-seed`.
pub fn marker_data() -> Value {
    json!({"inherited": true})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn before_v2_the_marker_goes_before_the_first_event_past_the_cut_once() {
        let mut cut = InheritedCut::new(1, true, Some(3));
        assert!(!cut.marker_before(2, "turn/end", None));
        assert!(cut.marker_before(3, "turn/start", None));
        assert!(!cut.marker_before(4, "step/start", None));
        assert_eq!(cut.finish(5), Ok(false));
    }

    #[test]
    fn an_end_seed_at_the_cut_becomes_the_marker() {
        let mut cut = InheritedCut::new(1, true, Some(2));
        let mut data = json!({});
        assert!(!cut.marker_before(2, "session/end-seed", Some(&mut data)));
        assert_eq!(data, marker_data());
        assert!(!cut.marker_before(3, "turn/start", None));
    }

    #[test]
    fn a_log_of_only_inherited_events_ends_with_the_marker_and_a_cut_past_its_end_is_refused() {
        assert_eq!(InheritedCut::new(0, true, Some(4)).finish(4), Ok(true));
        assert!(InheritedCut::new(1, true, Some(5))
            .finish(4)
            .unwrap_err()
            .contains("seedLength 5 exceeds its 4 events"));
        assert_eq!(InheritedCut::new(1, false, None).finish(4), Ok(false));
    }

    #[test]
    fn from_v2_a_seeded_log_needs_its_marker_and_an_unseeded_one_may_not_have_one() {
        let mut seeded = InheritedCut::new(3, true, None);
        assert_eq!(
            seeded.finish(9),
            Err("format v3 seeded Session lacks an accepted inherited end-seed marker".to_owned())
        );
        seeded.end_seed(&marker_data()).unwrap();
        assert_eq!(seeded.finish(9), Ok(false));
        let refused = InheritedCut::new(2, false, None).end_seed(&marker_data()).unwrap_err();
        assert_eq!(refused, "format v2 unseeded Session contains an inherited end-seed marker");
        assert!(InheritedCut::new(3, false, None).end_seed(&json!({})).is_ok(), "a restore's end-seed is no marker");
    }

    #[test]
    fn a_cut_through_an_attempt_s_chunks_is_refused() {
        let cut = InheritedCut::new(1, true, Some(5));
        assert_eq!(cut.whole_attempt(3, 5), Err("inherited Session cut 5 splits one Assistant attempt".to_owned()));
        assert!(cut.whole_attempt(5, 7).is_ok() && cut.whole_attempt(2, 4).is_ok());
    }
}
