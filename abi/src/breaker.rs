//! The circuit breaker of a route, as maths apart from where it is kept: [`apply`] takes the
//! state, one event and the time, and gives the new state and the answer. The host keeps the
//! state in the counter store a row names and applies events there atomically (under a mutex,
//! under the machine store's file lock, or in one Redis script that follows this function), so
//! every process sharing a store sees one circuit.
//!
//! ```text
//! closed ──(`failures` failures within `window_ms`)──▶ open until now + cooldown
//! open ──(cooldown over)──▶ half-open: the first admit takes the one probe (leased for a cooldown)
//! half-open ──probe answered──▶ closed      half-open ──probe failed──▶ open again
//! ```
//!
//! Re-opening takes the later of the deadline already set and `now + cooldown_ms`: a deadline is
//! never shortened.

use abi_stable::StableAbi;
use serde::{Deserialize, Serialize};

/// A row's breaker settings.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq)]
pub struct BreakerPolicy {
    /// Failures within the window that open the circuit (at least 1).
    pub failures: u32,
    pub window_ms: f64,
    pub cooldown_ms: f64,
}

/// What happened on a route.
#[repr(u8)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq)]
pub enum BreakerEvent {
    /// A request wants to go to the route: may it? (In half-open, the first asker takes the probe.)
    Admit,
    /// A request to the route failed with a code the row counts.
    Failure,
    /// A request to the route was answered.
    Success,
}

impl BreakerEvent {
    /// The event's name in the stores' wire form (the Redis script's argument).
    pub fn as_str(self) -> &'static str {
        match self {
            BreakerEvent::Admit => "admit",
            BreakerEvent::Failure => "failure",
            BreakerEvent::Success => "success",
        }
    }
}

/// The circuit's phase.
#[repr(u8)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Closed,
    Open,
    HalfOpen,
}

impl Phase {
    /// The phase's name, as `config counters` shows it and the Redis script answers it.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Closed => "closed",
            Phase::Open => "open",
            Phase::HalfOpen => "half-open",
        }
    }

    /// The phase named `name`.
    pub fn parse(name: &[u8]) -> Option<Phase> {
        [Phase::Closed, Phase::Open, Phase::HalfOpen].into_iter().find(|phase| phase.as_str().as_bytes() == name)
    }
}

/// The answer to one event.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq)]
pub struct BreakerAnswer {
    /// The phase after the event.
    pub phase: Phase,
    /// For [`BreakerEvent::Admit`]: whether the request may go (closed, or this is the probe).
    pub admitted: bool,
    /// Whether this caller holds the half-open probe.
    pub probe: bool,
    /// When the circuit is open: the epoch ms it stays open until (0 otherwise).
    pub open_until_ms: f64,
}

/// A circuit's stored state. Field names are the stores' JSON (the Redis script reads them).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BreakerState {
    /// 0: closed. Otherwise the deadline of the open phase; past it the circuit is half-open.
    #[serde(default)]
    pub open_until: f64,
    /// The lease of the half-open probe (0: none taken).
    #[serde(default)]
    pub probe_until: f64,
    /// The times of the latest failures while closed (at most `failures` of them).
    #[serde(default)]
    pub failures: Vec<f64>,
}

impl BreakerState {
    pub fn phase(&self, now: f64) -> Phase {
        if self.open_until == 0.0 {
            Phase::Closed
        } else if now < self.open_until {
            Phase::Open
        } else {
            Phase::HalfOpen
        }
    }

    fn open(&mut self, now: f64, policy: &BreakerPolicy) {
        self.open_until = self.open_until.max(now + policy.cooldown_ms);
        self.probe_until = 0.0;
        self.failures.clear();
    }

    fn answer(&self, now: f64, admitted: bool, probe: bool) -> BreakerAnswer {
        let phase = self.phase(now);
        let open_until_ms = if phase == Phase::Closed { 0.0 } else { self.open_until };
        BreakerAnswer { phase, admitted, probe, open_until_ms }
    }
}

/// Applies `event` at `now` (epoch ms) to `state`.
pub fn apply(state: &mut BreakerState, event: BreakerEvent, policy: &BreakerPolicy, now: f64) -> BreakerAnswer {
    match (event, state.phase(now)) {
        (BreakerEvent::Admit, Phase::Closed) => state.answer(now, true, false),
        (BreakerEvent::Admit, Phase::Open) => state.answer(now, false, false),
        (BreakerEvent::Admit, Phase::HalfOpen) if state.probe_until > now => state.answer(now, false, false),
        (BreakerEvent::Admit, Phase::HalfOpen) => {
            state.probe_until = now + policy.cooldown_ms;
            state.answer(now, true, true)
        }
        (BreakerEvent::Failure, Phase::Closed) => {
            state.failures.retain(|&at| at > now - policy.window_ms);
            state.failures.push(now);
            let keep = policy.failures.max(1) as usize;
            if state.failures.len() > keep {
                state.failures.drain(..state.failures.len() - keep);
            }
            if state.failures.len() >= keep {
                state.open(now, policy);
            }
            state.answer(now, false, false)
        }
        (BreakerEvent::Failure, Phase::Open | Phase::HalfOpen) => {
            state.open(now, policy);
            state.answer(now, false, false)
        }
        (BreakerEvent::Success, Phase::HalfOpen) => {
            *state = BreakerState::default();
            state.answer(now, false, false)
        }
        (BreakerEvent::Success, Phase::Closed | Phase::Open) => state.answer(now, false, false),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const POLICY: BreakerPolicy = BreakerPolicy { failures: 3, window_ms: 1_000.0, cooldown_ms: 500.0 };

    fn run(state: &mut BreakerState, events: &[(BreakerEvent, f64)]) -> Vec<BreakerAnswer> {
        events.iter().map(|&(event, at)| apply(state, event, &POLICY, at)).collect()
    }

    #[test]
    fn the_circuit_opens_after_failures_within_the_window_only() {
        let mut state = BreakerState::default();
        run(&mut state, &[(BreakerEvent::Failure, 0.0), (BreakerEvent::Failure, 100.0)]);
        let spread = apply(&mut state, BreakerEvent::Failure, &POLICY, 1_050.0);
        assert_eq!(spread.phase, Phase::Closed, "the first failure left the window");
        let third = apply(&mut state, BreakerEvent::Failure, &POLICY, 1_060.0);
        assert_eq!((third.phase, third.open_until_ms), (Phase::Open, 1_560.0));
        assert!(!apply(&mut state, BreakerEvent::Admit, &POLICY, 1_100.0).admitted);
    }

    #[test]
    fn one_probe_after_the_cooldown_then_closed_on_success() {
        let mut state = BreakerState { open_until: 500.0, ..BreakerState::default() };
        let probe = apply(&mut state, BreakerEvent::Admit, &POLICY, 600.0);
        assert!(probe.admitted && probe.probe);
        assert_eq!(probe.phase, Phase::HalfOpen);
        assert!(!apply(&mut state, BreakerEvent::Admit, &POLICY, 601.0).admitted, "one probe");
        apply(&mut state, BreakerEvent::Success, &POLICY, 700.0);
        assert_eq!(state, BreakerState::default());
        assert!(apply(&mut state, BreakerEvent::Admit, &POLICY, 701.0).admitted);
    }

    #[test]
    fn a_failed_probe_reopens_and_a_lost_probe_is_given_again_after_its_lease() {
        let mut state = BreakerState { open_until: 500.0, ..BreakerState::default() };
        apply(&mut state, BreakerEvent::Admit, &POLICY, 600.0);
        let reopened = apply(&mut state, BreakerEvent::Failure, &POLICY, 650.0);
        assert_eq!((reopened.phase, reopened.open_until_ms), (Phase::Open, 1_150.0));
        apply(&mut state, BreakerEvent::Admit, &POLICY, 1_200.0);
        assert!(!apply(&mut state, BreakerEvent::Admit, &POLICY, 1_699.0).admitted);
        assert!(apply(&mut state, BreakerEvent::Admit, &POLICY, 1_700.0).probe, "the lease ran out");
    }

    #[test]
    fn a_stale_success_does_not_close_an_open_circuit() {
        let mut state = BreakerState { open_until: 500.0, ..BreakerState::default() };
        assert_eq!(apply(&mut state, BreakerEvent::Success, &POLICY, 100.0).phase, Phase::Open);
    }

    proptest! {
        #[test]
        fn a_deadline_is_never_shortened_and_failures_stay_bounded(
            steps in proptest::collection::vec((0u8..3, 0u32..400), 1..200),
        ) {
            let mut state = BreakerState::default();
            let mut now = 0.0;
            for (event, gap) in steps {
                now += f64::from(gap);
                let event = [BreakerEvent::Admit, BreakerEvent::Failure, BreakerEvent::Success][event as usize];
                let before = state.clone();
                apply(&mut state, event, &POLICY, now);
                let closed_by_probe = event == BreakerEvent::Success && before.phase(now) == Phase::HalfOpen;
                if !closed_by_probe {
                    prop_assert!(state.open_until >= before.open_until);
                }
                prop_assert!(state.failures.len() < POLICY.failures as usize);
            }
        }
    }
}
