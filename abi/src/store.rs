//! What a counter store does to its entries, apart from where it keeps them: a counter's update
//! ([`clamped`]) and a circuit's ([`apply_stored`]). The host's stores (memory, the machine's
//! file, and the Redis script, which follows these functions) and the author kit's fake host all
//! update through here, so a plugin's unit tests get the answers the host gives.

use std::collections::HashMap;

use crate::breaker::{self, BreakerAnswer, BreakerEvent, BreakerPolicy, BreakerState};

/// `value + delta`, within `[floor, ceiling]`. A ceiling below the floor is the floor, and a
/// floor that is not a number bounds nothing: no bounds a plugin passes make the update panic.
pub fn clamped(value: f64, delta: f64, floor: f64, ceiling: f64) -> f64 {
    let floor = if floor.is_nan() { f64::NEG_INFINITY } else { floor };
    (value + delta).clamp(floor, ceiling.max(floor))
}

/// [`clamped`] on the counter `key` of `counters`, which starts at `initial`; the new value.
pub fn add_in(
    counters: &mut HashMap<String, f64>,
    key: &str,
    delta: f64,
    initial: f64,
    floor: f64,
    ceiling: f64,
) -> f64 {
    let value = counters.entry(key.to_owned()).or_insert(initial);
    *value = clamped(*value, delta, floor, ceiling);
    *value
}

/// Applies `event` at `now_ms` to a circuit whose stored entry is `stored` (`None`: no entry, a
/// closed circuit). Gives the answer and the entry to keep: `None` for a closed circuit without
/// failures, which a store keeps no entry for (so a store holds only circuits with news).
pub fn apply_stored(
    stored: Option<BreakerState>,
    event: BreakerEvent,
    policy: &BreakerPolicy,
    now_ms: f64,
) -> (BreakerAnswer, Option<BreakerState>) {
    let mut state = stored.unwrap_or_default();
    let answer = breaker::apply(&mut state, event, policy, now_ms);
    (answer, (state != BreakerState::default()).then_some(state))
}

/// [`apply_stored`] on the circuit `key` of `circuits`.
pub fn apply_in(
    circuits: &mut HashMap<String, BreakerState>,
    key: &str,
    event: BreakerEvent,
    policy: &BreakerPolicy,
    now_ms: f64,
) -> BreakerAnswer {
    let (answer, kept) = apply_stored(circuits.remove(key), event, policy, now_ms);
    if let Some(state) = kept {
        circuits.insert(key.to_owned(), state);
    }
    answer
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::breaker::Phase;

    const POLICY: BreakerPolicy = BreakerPolicy { failures: 2, window_ms: 1_000.0, cooldown_ms: 500.0 };

    #[test]
    fn a_ceiling_below_the_floor_is_the_floor() {
        assert_eq!(clamped(5.0, 1.0, 3.0, 1.0), 3.0);
        assert_eq!(clamped(-5.0, 0.0, 3.0, 1.0), 3.0);
    }

    #[test]
    fn a_counter_starts_at_its_initial_value_and_stays_in_range() {
        let mut counters = HashMap::new();
        assert_eq!(add_in(&mut counters, "k", -1.0, 10.0, 0.0, 10.0), 9.0);
        assert_eq!(add_in(&mut counters, "k", 5.0, 10.0, 0.0, 10.0), 10.0);
        assert_eq!(add_in(&mut counters, "k", -50.0, 10.0, 0.0, 10.0), 0.0);
    }

    #[test]
    fn a_circuit_closed_again_leaves_no_entry_and_a_failure_keeps_one() {
        let mut circuits = HashMap::new();
        apply_in(&mut circuits, "route", BreakerEvent::Failure, &POLICY, 0.0);
        assert_eq!(circuits["route"].failures, [0.0]);
        assert_eq!(apply_in(&mut circuits, "route", BreakerEvent::Failure, &POLICY, 1.0).phase, Phase::Open);
        assert!(apply_in(&mut circuits, "route", BreakerEvent::Admit, &POLICY, 501.0).probe);
        assert_eq!(apply_in(&mut circuits, "route", BreakerEvent::Success, &POLICY, 502.0).phase, Phase::Closed);
        assert!(circuits.is_empty(), "{circuits:?}");
        apply_in(&mut circuits, "other", BreakerEvent::Admit, &POLICY, 503.0);
        assert!(circuits.is_empty(), "admitting through a closed circuit stores nothing");
    }

    proptest! {
        #[test]
        fn an_update_never_panics_and_stays_within_ordered_bounds(
            value in proptest::num::f64::ANY,
            delta in proptest::num::f64::ANY,
            floor in proptest::num::f64::ANY,
            ceiling in proptest::num::f64::ANY,
        ) {
            let updated = clamped(value, delta, floor, ceiling);
            let sum = value + delta;
            if floor <= ceiling && !sum.is_nan() {
                prop_assert!((floor..=ceiling).contains(&updated), "{updated}");
                prop_assert_eq!(updated, sum.max(floor).min(ceiling));
            }
            if ceiling < floor && !sum.is_nan() {
                prop_assert_eq!(updated, floor);
            }
        }
    }
}
