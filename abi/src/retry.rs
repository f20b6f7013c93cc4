//! Retry maths every executor needs, apart from any effect (the way tower's `retry::backoff`
//! keeps delays apart from the service): the timer cap, the jittered exponential backoff, the
//! position of a failure in its chain, and the sorted code list of a policy key. The bundled
//! executors use these, and so can third-party ones; the host checks every decision against
//! [`check_decision`] before it writes anything.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::js;
use crate::types::{ChainRecord, RetryDecision};

mod one_pass;

/// The longest wait a JavaScript timer accepts, and so the longest `delayMs` a retry record may
/// carry (`2^31 - 1` milliseconds, about 24.8 days).
pub const MAX_DELAY_MS: f64 = 2_147_483_647.0;

/// [`MAX_DELAY_MS`] as an integer, for configs that take whole milliseconds.
pub const MAX_DELAY_MS_INTEGER: u64 = MAX_DELAY_MS as u64;

/// A jittered exponential backoff, in the operation order of the TypeScript reference, so the
/// result equals its doubles bit for bit:
///
/// ```text
/// exponential = initialDelayMs == 0 ? 0 : min(initialDelayMs * 2^min(retry - 1, 1024), maxDelayMs)
/// factor      = (1 - jitterRatio) + (2 * jitterRatio) * clamp(random, 0, 1)
/// delayMs     = min(exponential * factor, maxDelayMs)
/// ```
///
/// `2^1024` is infinite and capped by the `min`; a zero initial delay stays zero however far the
/// chain has gone (`0 * ∞` would be NaN).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    pub initial_delay_ms: f64,
    pub max_delay_ms: f64,
    pub jitter_ratio: f64,
}

impl Backoff {
    /// The delay before retry number `retry` (from 1), given one random sample in [0, 1].
    pub fn delay(&self, retry: u64, random: f64) -> f64 {
        let exponential = if self.initial_delay_ms == 0.0 {
            0.0
        } else {
            (self.initial_delay_ms * js::pow2(retry.saturating_sub(1).min(1024))).min(self.max_delay_ms)
        };
        let factor = (1.0 - self.jitter_ratio) + (2.0 * self.jitter_ratio) * random.clamp(0.0, 1.0);
        (exponential * factor).min(self.max_delay_ms)
    }
}

/// Where a failure stands in its chain (turn, step, provider, policy key), from the chain's last
/// `llm/retry` as the host's history index knows it.
#[derive(Debug, Clone, PartialEq)]
pub struct ChainPosition {
    prior: Option<ChainRecord>,
}

impl ChainPosition {
    pub fn new(prior: Option<ChainRecord>) -> Self {
        ChainPosition { prior }
    }

    /// Retries already scheduled in the chain (0 for a new chain).
    pub fn previous(&self) -> u64 {
        self.prior.as_ref().map_or(0, |record| record.retry)
    }

    /// The number of the next retry.
    pub fn next_retry(&self) -> u64 {
        self.previous().saturating_add(1)
    }

    /// The chain's `retryId`: the prior record's, or `new_id()` for a new chain.
    pub fn retry_id(self, new_id: impl FnOnce() -> String) -> String {
        match self.prior {
            Some(record) => record.retry_id.into_string(),
            None => new_id(),
        }
    }
}

/// Codes in the order a policy key lists them: by UTF-16 code unit, as JavaScript's `sort()`.
pub fn sorted_codes<'a>(codes: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let mut sorted: Vec<&str> = codes.into_iter().collect();
    sorted.sort_by(|a, b| js::cmp_utf16(a, b));
    sorted
}

/// A retry decision the host may carry out: its wait, and its record as one line of compact
/// JSON (the plugin's key order and number text kept).
#[derive(Debug, Clone, PartialEq)]
pub struct CheckedRetry {
    pub delay_ms: f64,
    /// The record, minified to one line.
    pub record: String,
    pub retry_id: String,
    /// The record's `retry`, as written.
    pub retry: serde_json::Value,
    /// The record's `maxRetries` and `headRetries`, when it has them (the last, when repeated):
    /// what a screen needs to show the retry's place in its chain.
    pub max_retries: Option<serde_json::Value>,
    pub head_retries: Option<serde_json::Value>,
}

/// The fields of a record the host relies on, however the record was read.
#[derive(Default)]
struct Picked<'a> {
    retry_id: Option<Cow<'a, str>>,
    retry: Option<serde_json::Value>,
    /// `delayMs` as written.
    delay_ms: Option<&'a str>,
    max_retries: Option<serde_json::Value>,
    head_retries: Option<serde_json::Value>,
}

/// [`Picked`] as serde_json reads it: a repeated checked field is an error, as a derived struct
/// would say; a repeated `maxRetries` or `headRetries` keeps its last value, as `Value` does,
/// and neither is held to more than being JSON (see [`shown_value`]).
struct RecordFields<'a>(Picked<'a>);

impl<'de> Deserialize<'de> for RecordFields<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(RecordVisitor)
    }
}

struct RecordVisitor;

impl<'de> serde::de::Visitor<'de> for RecordVisitor {
    type Value = RecordFields<'de>;

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("struct RecordFields")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        use serde::de::{Error, IgnoredAny};
        fn once<T, E: Error>(slot: &mut Option<T>, name: &'static str, value: T) -> Result<(), E> {
            match slot.replace(value) {
                Some(_) => Err(E::duplicate_field(name)),
                None => Ok(()),
            }
        }
        // `Option<Option<_>>`, as a derived struct keeps them: `null` reads as absent, yet counts.
        let (mut retry_id, mut retry, mut delay_ms) = (None, None, None);
        let mut picked = Picked::default();
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            match key.as_ref() {
                "retryId" => once(&mut retry_id, "retryId", map.next_value::<Option<Cow<'de, str>>>()?)?,
                "retry" => once(&mut retry, "retry", map.next_value::<Option<serde_json::Value>>()?)?,
                "delayMs" => once(&mut delay_ms, "delayMs", map.next_value::<Option<&'de RawValue>>()?)?,
                "maxRetries" => picked.max_retries = shown_value(map.next_value()?),
                "headRetries" => picked.head_retries = shown_value(map.next_value()?),
                _ => drop(map.next_value::<IgnoredAny>()?),
            }
        }
        picked.retry_id = retry_id.flatten();
        picked.retry = retry.flatten();
        picked.delay_ms = delay_ms.flatten().map(RawValue::get);
        Ok(RecordFields(picked))
    }
}

/// Checks a retry decision before anything of it is written: the delay is a finite number within
/// `0..=MAX_DELAY_MS`; the record is one JSON object with a non-empty `retryId`, a numeric
/// `retry` and a `delayMs` equal to the delay. `Err` says what is wrong, for the message that
/// names the row.
///
/// A record is read in one pass that also makes it compact; one that pass does not read quickly
/// is read by [`check_decision_by_serde`], with the same answer.
pub fn check_decision(decision: &RetryDecision) -> Result<CheckedRetry, String> {
    let Some((picked, record)) = one_pass::read(decision.record.as_str()) else {
        return check_decision_by_serde(decision);
    };
    checked(picked, checked_delay(decision.delay_ms)?, record)
}

/// [`check_decision`] as the host applies it to the decision a row returns (and the author kit's
/// fake host to a decision it takes in): `Err` is the message of the row's failure.
pub fn check_row_decision(decision: &RetryDecision) -> Result<CheckedRetry, String> {
    check_decision(decision).map_err(|why| format!("returned a retry decision the host cannot carry out: {why}"))
}

/// [`check_decision`], reading the record with serde_json alone: the reference its one-pass
/// reading is held to (by property tests, and by the `retry_record` fuzz target).
pub fn check_decision_by_serde(decision: &RetryDecision) -> Result<CheckedRetry, String> {
    let delay_ms = checked_delay(decision.delay_ms)?;
    let text = decision.record.as_str();
    let picked = read_by_serde(text)?;
    checked(picked, delay_ms, js::minify(text.trim()))
}

fn checked_delay(delay_ms: f64) -> Result<f64, String> {
    if !delay_ms.is_finite() || !(0.0..=MAX_DELAY_MS).contains(&delay_ms) {
        return Err(format!(
            "its retry delay {} is not a finite number of milliseconds within 0..2147483647",
            js::string(delay_ms)
        ));
    }
    Ok(delay_ms)
}

fn read_by_serde(text: &str) -> Result<Picked<'_>, String> {
    match serde_json::from_str::<RecordFields<'_>>(text) {
        Ok(RecordFields(picked)) => Ok(picked),
        Err(err) if err.is_data() && serde_json::from_str::<&RawValue>(text).is_ok() => {
            Err(if text.trim_start().starts_with('{') {
                format!("its llm/retry record cannot be read ({err})")
            } else {
                "its llm/retry record is not a JSON object".to_owned()
            })
        }
        Err(err) => Err(format!("its llm/retry record is not valid JSON ({err})")),
    }
}

/// The decision, once its record's fields agree with it; `record` is the record made compact.
fn checked(picked: Picked<'_>, delay_ms: f64, record: String) -> Result<CheckedRetry, String> {
    let retry_id = match picked.retry_id {
        Some(id) if !id.is_empty() => id.into_owned(),
        _ => return Err("its llm/retry record has no retryId (a non-empty string)".to_owned()),
    };
    let retry = match picked.retry {
        Some(retry @ serde_json::Value::Number(_)) => retry,
        _ => return Err("its llm/retry record has no numeric retry".to_owned()),
    };
    let record_delay = picked.delay_ms.and_then(number_as_f64);
    if record_delay != Some(delay_ms) {
        return Err(format!(
            "its retry delay {} differs from its record's delayMs {}",
            js::number(delay_ms),
            picked.delay_ms.unwrap_or("(none)")
        ));
    }
    Ok(CheckedRetry {
        delay_ms,
        record,
        retry_id,
        retry,
        max_retries: picked.max_retries,
        head_retries: picked.head_retries,
    })
}

/// A field kept only for display, as `Value` reads it: one it cannot read (`1e400`, a lone
/// surrogate) is as good as absent, so it never changes whether a record is accepted.
fn shown_value(raw: &RawValue) -> Option<serde_json::Value> {
    serde_json::from_str(raw.get()).ok()
}

/// A JSON value's text as a double, when it is a number in range. Rust's parser rounds as
/// serde_json's (`float_roundtrip`) does, and only reads numbers where JSON has them; out of
/// range it answers infinity, which no checked delay equals, where serde_json answers an error.
fn number_as_f64(text: &str) -> Option<f64> {
    text.parse().ok()
}

/// A JSON number's text as serde_json's `Value`: a `u64` when it is one (JSON's grammar leaves
/// such a number nothing but digits), without serde_json's parser.
fn number_value(text: &str) -> Option<serde_json::Value> {
    match text.parse::<u64>() {
        Ok(integer) => Some(integer.into()),
        Err(_) => serde_json::from_str(text).ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const DEFAULT: Backoff = Backoff { initial_delay_ms: 500.0, max_delay_ms: 10_000.0, jitter_ratio: 0.1 };

    #[test]
    fn delays_double_from_the_initial_delay_within_the_jitter_band() {
        assert_eq!(DEFAULT.delay(1, 0.0), 450.0);
        assert_eq!(DEFAULT.delay(2, 1.0), 1100.0);
        let tiny = Backoff { initial_delay_ms: 1.0, max_delay_ms: 4.0, jitter_ratio: 0.1 };
        let delays: Vec<f64> = (1..=4).map(|retry| tiny.delay(retry, 1.0)).collect();
        assert_eq!(delays, [1.1, 2.2, 4.0, 4.0]);
    }

    #[test]
    fn a_zero_initial_delay_stays_zero_at_any_retry() {
        let zero = Backoff { initial_delay_ms: 0.0, max_delay_ms: 0.0, jitter_ratio: 1.0 };
        assert_eq!(zero.delay(10_000, 1.0), 0.0);
        assert_eq!(zero.delay(u64::MAX, 1.0), 0.0);
    }

    #[test]
    fn a_huge_retry_number_clamps_the_exponent() {
        let policy = Backoff { initial_delay_ms: 3.0, max_delay_ms: 7000.0, jitter_ratio: 0.25 };
        assert_eq!(policy.delay(1101, 0.3), 6300.0);
        assert_eq!(policy.delay(u64::MAX, 0.3), 6300.0);
    }

    #[test]
    fn a_chain_continues_with_its_id_or_starts_with_a_new_one() {
        let fresh = ChainPosition::new(None);
        assert_eq!((fresh.previous(), fresh.next_retry()), (0, 1));
        assert_eq!(fresh.retry_id(|| "new".into()), "new");
        let going = ChainPosition::new(Some(ChainRecord { retry_id: "c".into(), retry: 4 }));
        assert_eq!(going.next_retry(), 5);
        assert_eq!(going.retry_id(|| unreachable!("the chain has an id")), "c");
    }

    #[test]
    fn codes_sort_by_utf16_code_unit() {
        assert_eq!(sorted_codes(["\u{FF5E}", "\u{1F600}", "B", "A"]), ["A", "B", "\u{1F600}", "\u{FF5E}"]);
    }

    fn decision(delay_ms: f64, record: &str) -> RetryDecision {
        RetryDecision { delay_ms, record: record.into() }
    }

    #[test]
    fn a_sound_decision_is_minified_with_its_number_text_and_key_order() {
        let checked = check_decision(&decision(
            1.5,
            "{\n  \"retryId\": \"c\",\n  \"retry\": 1.0,\n  \"delayMs\": 1.50,\n  \"x\": \"a b\"\n}",
        ))
        .unwrap();
        assert_eq!(checked.record, r#"{"retryId":"c","retry":1.0,"delayMs":1.50,"x":"a b"}"#);
        assert_eq!(checked.retry_id, "c");
    }

    #[test]
    fn delays_out_of_range_or_unlike_the_record_are_refused() {
        let record = r#"{"retryId":"c","retry":1,"delayMs":5}"#;
        for delay in [f64::NAN, f64::INFINITY, -1.0, 1e308, MAX_DELAY_MS + 1.0] {
            assert!(check_decision(&decision(delay, record)).is_err(), "{delay}");
        }
        let differs = check_decision(&decision(6.0, record)).unwrap_err();
        assert_eq!(differs, "its retry delay 6 differs from its record's delayMs 5");
        assert!(check_decision(&decision(5.0, record)).is_ok());
    }

    #[test]
    fn records_that_are_not_objects_or_lack_the_chain_fields_are_refused() {
        for record in [
            "[1]",
            "not json",
            r#"{"retry":1,"delayMs":5}"#,
            r#"{"retryId":"","retry":1,"delayMs":5}"#,
            r#"{"retryId":"c","delayMs":5}"#,
            r#"{"retryId":"c","retry":1}"#,
            r#"["c",1,5]"#,
        ] {
            assert!(check_decision(&decision(5.0, record)).is_err(), "{record}");
        }
    }

    #[test]
    fn the_fields_a_screen_shows_come_with_the_checked_record_the_last_when_repeated() {
        let record = r#"{"retryId":"c","retry":2,"maxRetries":4,"maxRetries":5,"headRetries":[1],"delayMs":5}"#;
        for checked in [check_decision(&decision(5.0, record)), check_decision_by_serde(&decision(5.0, record))] {
            let checked = checked.unwrap();
            assert_eq!(checked.max_retries, Some(5.into()));
            assert_eq!(checked.head_retries, Some(serde_json::json!([1])));
        }
        let unreadable = r#"{"retryId":"c","retry":2,"maxRetries":1e400,"headRetries":"\ud800","delayMs":5}"#;
        for checked in [check_decision(&decision(5.0, unreadable)), check_decision_by_serde(&decision(5.0, unreadable))]
        {
            let checked = checked.unwrap();
            assert_eq!((checked.max_retries, checked.head_retries), (None, None));
        }
    }

    /// JSON-ish text: valid JSON with random whitespace, escapes, nesting and tricky numbers,
    /// sometimes broken in ways a plugin could break it.
    fn json_text() -> impl Strategy<Value = String> {
        let space = prop::sample::select(vec!["", "", "", " ", "\n  ", "\t", "\r\n"]);
        let number =
            prop::sample::select(vec!["0", "-0", "500", "500.0", "5e2", "5E+2", "1.5", "2147483647.0000002", "-1"]);
        let string = "\"([a-z é😀\u{7f}]|\\\\[\"\\\\/bfnrt]|\\\\u[0-9a-fA-F]{4}){0,40}\"";
        let literal = prop::sample::select(vec!["true", "false", "null"]);
        let broken = prop::sample::select(vec![
            "01",
            "1.",
            "-",
            "1e400",
            "tru",
            "nul",
            "\"\\u12\"",
            "\"\\x\"",
            "\"\u{1}\"",
            "\"\u{1f}\"",
        ]);
        let leaf = prop_oneof![
            12 => number.prop_map(str::to_owned),
            12 => string,
            6 => literal.prop_map(str::to_owned),
            1 => broken.prop_map(str::to_owned),
        ];
        let inner_space = space.clone();
        let value = leaf.prop_recursive(3, 24, 4, move |inner| {
            let items = prop::collection::vec((inner, inner_space.clone()), 0..4);
            prop_oneof![
                items.clone().prop_map(|items| container(
                    '[',
                    ']',
                    items.into_iter().map(|(v, s)| format!("{s}{v}{s}"))
                )),
                items.prop_map(|items| container(
                    '{',
                    '}',
                    items.into_iter().enumerate().map(|(i, (v, s))| format!("{s}\"k{i}\"{s}:{s}{v}"))
                )),
            ]
        });
        let field = |key: &'static str, values: Vec<&'static str>| {
            prop::option::weighted(0.9, prop::sample::select(values).prop_map(move |value| (key, value.to_owned())))
        };
        let fields = (
            field("retryId", vec!["\"c\"", "\"c\"", "\"c\\n\"", "\"\"", "1"]),
            field("retry", vec!["1", "1", "1.0", "\"1\"", "1e400", "null"]),
            field("delayMs", vec!["500", "500", "5e2", "500.0", "1.5", "null", "\"500\""]),
        );
        let key = prop::sample::select(vec!["x", "y", "z", "x", "retry", "re\\u0074ry", "maxRetries", "headRetries"]);
        let others = prop::collection::vec((key, value), 0..3);
        let damage = prop_oneof![6 => Just(""), 1 => prop::sample::select(vec!["}", ",", "\\", "\"", " "])];
        let members = (fields, others).prop_flat_map(|((id, retry, delay), others)| {
            let mut members: Vec<(&str, String)> = [id, retry, delay].into_iter().flatten().collect();
            members.extend(others);
            Just(members).prop_shuffle()
        });
        (members, prop::collection::vec(space, 5), any::<prop::sample::Index>(), damage).prop_map(
            |(members, spaces, at, damage)| {
                let members = members.into_iter().enumerate().map(|(i, (key, value))| {
                    let (a, b) = (spaces[i % 5], spaces[(i + 2) % 5]);
                    format!("{a}\"{key}\"{b}:{a}{value}{b}")
                });
                let mut text = format!("{}{}{}", spaces[3], container('{', '}', members), spaces[4]);
                let mut at = at.index(text.len() + 1);
                while !text.is_char_boundary(at) {
                    at -= 1;
                }
                text.insert_str(at, damage);
                text
            },
        )
    }

    fn container(open: char, close: char, items: impl Iterator<Item = String>) -> String {
        format!("{open}{}{close}", items.collect::<Vec<_>>().join(","))
    }

    proptest! {
        #[test]
        fn numbers_are_read_as_serde_json_reads_them(text in "-?(0|[1-9][0-9]{0,24})(\\.[0-9]{1,24})?([eE][+-]?[0-9]{1,3})?") {
            let by_serde = serde_json::from_str::<f64>(&text).ok();
            let ours = number_as_f64(&text);
            prop_assert!(ours == by_serde || (by_serde.is_none() && ours.is_some_and(f64::is_infinite)), "{text}");
            prop_assert_eq!(number_value(&text), serde_json::from_str::<serde_json::Value>(&text).ok());
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        #[test]
        fn the_one_pass_reading_answers_as_serde_json_does(record in json_text(), delay in prop::sample::select(vec![500.0, 1.5, 0.0])) {
            let decision = decision(delay, &record);
            prop_assert_eq!(check_decision(&decision), check_decision_by_serde(&decision));
        }
    }

    proptest! {
        #[test]
        fn delays_are_finite_and_within_their_bounds(
            initial in 0.0f64..=MAX_DELAY_MS, spread in 0.0f64..=1.0, jitter in 0.0f64..=1.0,
            retry in 1u64..=u64::from(u32::MAX), random in 0.0f64..=1.0,
        ) {
            let max = initial + (MAX_DELAY_MS - initial) * spread;
            let backoff = Backoff { initial_delay_ms: initial, max_delay_ms: max, jitter_ratio: jitter };
            let delay = backoff.delay(retry, random);
            let exponential = if initial == 0.0 { 0.0 } else { (initial * js::pow2((retry - 1).min(1024))).min(max) };
            prop_assert!(delay.is_finite());
            prop_assert!(delay >= exponential * (1.0 - jitter));
            prop_assert!(delay <= max);
            let record = format!(r#"{{"retryId":"c","retry":1,"delayMs":{}}}"#, js::number(delay));
            prop_assert!(check_decision(&decision(delay, &record)).is_ok());
        }
    }
}
