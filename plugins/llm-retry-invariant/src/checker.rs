//! The retry-record rules as a streaming state machine.
//!
//! The reference validates each record by scanning every earlier event (quadratic). This checker
//! is fed every event in order and keeps only running state: the open turn and step, the provider
//! of the latest `request/header`, and one compact entry per retry chain. Retry ids, providers
//! and policy keys are interned into string arenas; a chain's scheduled attempts are its retries
//! `1..=last` and its started attempts a count (plus a set for the rare start out of order), so
//! memory grows with the number of chains, never with the log. Most events cost a type
//! comparison; the few structural and retry events are read as borrowed views, JavaScript's way
//! ([`dsh_abi::js_value`]): `undefined` apart from `null`, exact numbers, lone surrogates kept.
//!
//! One bad record, one message: a refused `llm/retry` is still taken in as far as its place in
//! the log can be told — the open turn and step, the routed provider, its policy key — so the
//! records after it are judged on their own instead of failing in a cascade. (An append the host
//! refuses is never written and ends the turn, so nothing later builds on it.)

use std::borrow::Cow;
use std::hash::BuildHasher;

use dsh_abi::js_value::{quote, Fields, JsValue};
use dsh_abi::retry::MAX_DELAY_MS;
use hashbrown::{DefaultHashBuilder, HashSet, HashTable};

/// Strings stored once, in one arena, numbered in order of arrival.
#[derive(Default)]
struct Interner {
    text: String,
    spans: Vec<(usize, usize)>,
    table: HashTable<u32>,
    hasher: DefaultHashBuilder,
}

impl Interner {
    fn text(&self, id: u32) -> &str {
        let (start, end) = self.spans[id as usize];
        &self.text[start..end]
    }

    fn find(&self, text: &str) -> Option<u32> {
        let hash = self.hasher.hash_one(text);
        self.table.find(hash, |id| self.text(*id) == text).copied()
    }

    fn intern(&mut self, text: &str) -> u32 {
        if let Some(id) = self.find(text) {
            return id;
        }
        let id = self.spans.len() as u32;
        let start = self.text.len();
        self.text.push_str(text);
        self.spans.push((start, self.text.len()));
        let Interner { text: arena, spans, table, hasher } = self;
        table.insert_unique(hasher.hash_one(text), id, |id| {
            let (start, end) = spans[*id as usize];
            hasher.hash_one(&arena[start..end])
        });
        id
    }

    fn len(&self) -> usize {
        self.spans.len()
    }
}

/// A JSON value as `===` compares it, in 8 bytes: a number is its double's bits (`-0` as `0`;
/// JSON has no NaN), anything else a NaN with a tag and, for a string, its interned id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Scalar(u64);

impl Scalar {
    const BOXED: u64 = 0xFFF8_0000_0000_0000;
    const UNDEFINED: Scalar = Scalar(Self::BOXED | 1 << 48);
    const NULL: Scalar = Scalar(Self::BOXED | 2 << 48);
    const FALSE: Scalar = Scalar(Self::BOXED | 3 << 48);
    const TRUE: Scalar = Scalar(Self::BOXED | 3 << 48 | 1);
    const TEXT: u64 = Self::BOXED | 4 << 48;
    /// An object or array: equal to nothing, not even itself.
    const UNIQUE: Scalar = Scalar(Self::BOXED | 5 << 48);

    fn number(number: f64) -> Scalar {
        Scalar(if number == 0.0 { 0 } else { number.to_bits() })
    }
}

/// One retry chain: (turn, step, provider, policy key), its last retry and its started attempts.
#[derive(Debug, Clone, Copy)]
struct Chain {
    turn: Scalar,
    step: Scalar,
    provider: u32,
    policy_key: u32,
    /// `NO_ID` while a chain taken in from a refused record has not shown a usable id.
    retry_id: u32,
    last_retry: u64,
    /// Attempts `1..=started_prefix` have started.
    started_prefix: u64,
}

const NO_ID: u32 = u32::MAX;

/// The running state of one session.
#[derive(Default)]
pub struct RetryChecker {
    /// Providers, policy keys, and string turn/step values.
    names: Interner,
    /// Retry ids of accepted records; `chain_of_id[id]` is the chain that owns each.
    ids: Interner,
    chain_of_id: Vec<u32>,
    chains: Vec<Chain>,
    chain_table: HashTable<u32>,
    hasher: DefaultHashBuilder,
    /// Started attempts beyond a chain's `started_prefix` (a start out of order).
    started_out_of_order: HashSet<(u32, u64)>,
    /// `data.turn` of the last `turn/start`, or `None` after a `turn/end` (or before any turn).
    open_turn: Option<JsValue<'static>>,
    /// `(turn, step)` of the last `step/start`, or `None` after a `step/end`.
    open_step: Option<(JsValue<'static>, JsValue<'static>)>,
    /// A `turn/end` came after the last `step/start`.
    turn_ended_since_step_start: bool,
    /// `header.config.provider` of the last `request/header` (in force across turns).
    header_provider: Option<JsValue<'static>>,
}

/// The fields of one record, read once.
struct Record<'a> {
    fields: Fields<'a>,
}

impl<'a> Record<'a> {
    /// A record's `data`; a record that is not an object has no fields.
    fn parse(data: &'a str) -> Record<'a> {
        let fields = JsValue::parse(data).and_then(|value| match value {
            JsValue::Object(std::borrow::Cow::Borrowed(text)) => Fields::parse(text),
            _ => None,
        });
        Record { fields: fields.unwrap_or_default() }
    }

    fn get(&self, key: &str) -> JsValue<'a> {
        self.fields.get(key)
    }
}

/// Where a refused record belongs, as far as it can be told.
struct Placement<'a> {
    turn: JsValue<'a>,
    step: JsValue<'a>,
    provider: Option<String>,
    policy_key: Option<Cow<'a, str>>,
}

impl RetryChecker {
    fn scalar(&mut self, value: &JsValue<'_>) -> Scalar {
        match value {
            JsValue::Undefined => Scalar::UNDEFINED,
            JsValue::Null => Scalar::NULL,
            JsValue::Bool(false) => Scalar::FALSE,
            JsValue::Bool(true) => Scalar::TRUE,
            JsValue::Number(number) => Scalar::number(*number),
            JsValue::String(text) => Scalar(Scalar::TEXT | u64::from(self.names.intern(text))),
            JsValue::Object(_) | JsValue::Array(_) => Scalar::UNIQUE,
        }
    }

    fn chain_hash(&self, turn: Scalar, step: Scalar, provider: u32, policy_key: u32) -> u64 {
        self.hasher.hash_one((turn, step, provider, policy_key))
    }

    fn find_chain(&self, turn: Scalar, step: Scalar, provider: u32, policy_key: u32) -> Option<u32> {
        let hash = self.chain_hash(turn, step, provider, policy_key);
        self.chain_table
            .find(hash, |index| {
                let chain = &self.chains[*index as usize];
                chain.turn == turn && chain.step == step && chain.provider == provider && chain.policy_key == policy_key
            })
            .copied()
    }

    fn new_chain(&mut self, chain: Chain) -> u32 {
        let index = self.chains.len() as u32;
        let hash = self.chain_hash(chain.turn, chain.step, chain.provider, chain.policy_key);
        self.chains.push(chain);
        let RetryChecker { chains, chain_table, hasher, .. } = self;
        chain_table.insert_unique(hash, index, |index| {
            let chain = &chains[*index as usize];
            hasher.hash_one((chain.turn, chain.step, chain.provider, chain.policy_key))
        });
        index
    }

    /// Gives `chain` the retry id `text`, which no chain owns yet.
    fn own_id(&mut self, chain: u32, text: &str) {
        let id = self.ids.intern(text);
        debug_assert_eq!(id as usize, self.chain_of_id.len(), "a new id");
        self.chain_of_id.push(chain);
        self.chains[chain as usize].retry_id = id;
    }

    /// Checks one event; `Err` is the violation message.
    pub fn check(&mut self, event_type: &str, data: &str) -> Result<(), String> {
        match event_type {
            dsh_abi::events::LLM_RETRY => {
                let record = Record::parse(data);
                let verdict = self.retry(&record);
                if verdict.is_err() {
                    self.take_in_refused(&record);
                }
                verdict
            }
            dsh_abi::events::LLM_RETRY_STARTED => self.started(&Record::parse(data)),
            dsh_abi::events::TURN_START => {
                self.open_turn = Some(Record::parse(data).get("turn").into_owned());
                Ok(())
            }
            dsh_abi::events::TURN_END => {
                self.open_turn = None;
                self.turn_ended_since_step_start = true;
                Ok(())
            }
            dsh_abi::events::STEP_START => {
                let record = Record::parse(data);
                self.open_step = Some((record.get("turn").into_owned(), record.get("step").into_owned()));
                self.turn_ended_since_step_start = false;
                Ok(())
            }
            dsh_abi::events::STEP_END => {
                self.open_step = None;
                Ok(())
            }
            dsh_abi::events::REQUEST_HEADER => {
                self.header_provider = Some(header_provider(data));
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// The provider of the request that failed in the open step (`undefined` when no step of
    /// this turn and step is open).
    fn routed_provider(&self) -> JsValue<'static> {
        match &self.header_provider {
            Some(provider) if !self.turn_ended_since_step_start => provider.clone(),
            _ => JsValue::Undefined,
        }
    }

    fn retry(&mut self, record: &Record<'_>) -> Result<(), String> {
        let fields = RetryFields::check(record)?;
        self.check_place(record)?;
        self.continue_chain(record, &fields)
    }

    /// The record names the open turn and step, and the provider of the request that failed.
    fn check_place(&self, record: &Record<'_>) -> Result<(), String> {
        let (turn, step) = (record.get("turn"), record.get("step"));
        let Some(open_turn) = &self.open_turn else {
            return Err("llm/retry must be appended inside an open turn".to_owned());
        };
        if !turn.strict_equals(open_turn) {
            return Err(format!(
                "llm/retry names turn {}, but the open turn is {}",
                turn.display(),
                open_turn.display()
            ));
        }
        let Some((step_turn, open_step)) = &self.open_step else {
            return Err("llm/retry must be appended inside an open step".to_owned());
        };
        if !step.strict_equals(open_step) || !turn.strict_equals(step_turn) {
            return Err(format!(
                "llm/retry names turn {}/step {}, but the open step is {}/{}",
                turn.display(),
                step.display(),
                step_turn.display(),
                open_step.display()
            ));
        }
        let (provider, routed) = (record.get("provider"), self.routed_provider());
        if !provider.strict_equals(&routed) {
            return Err(format!(
                "llm/retry provider {} does not match the failed request provider {}",
                provider.display(),
                routed.display()
            ));
        }
        Ok(())
    }

    /// The record's retry is the next of its provider-policy chain, under the chain's one id.
    fn continue_chain(&mut self, record: &Record<'_>, fields: &RetryFields<'_>) -> Result<(), String> {
        let (turn, step) = (self.scalar(&record.get("turn")), self.scalar(&record.get("step")));
        let (provider, policy_key) = (self.names.intern(&fields.provider), self.names.intern(&fields.policy_key));
        let prior = self.find_chain(turn, step, provider, policy_key);
        let expected = prior.map_or(1, |index| self.chains[index as usize].last_retry + 1);
        if fields.retry != expected as f64 {
            return Err(format!(
                "llm/retry retry {} must equal provider policy retry {expected}",
                record.get("retry").display()
            ));
        }
        let retry_id = &fields.retry_id;
        let known_id = self.ids.find(retry_id);
        match prior {
            Some(index) => {
                let chain = &mut self.chains[index as usize];
                match (chain.retry_id, known_id) {
                    (NO_ID, None) => self.own_id(index, retry_id),
                    (owned, Some(id)) if owned == id => {}
                    _ => return Err("llm/retry must preserve retryId across one provider-policy chain".to_owned()),
                }
                self.chains[index as usize].last_retry = expected;
            }
            None if known_id.is_some() => {
                return Err(format!("llm/retry retryId {} is already owned by another chain", quote(retry_id)))
            }
            None => {
                let chain =
                    Chain { turn, step, provider, policy_key, retry_id: NO_ID, last_retry: 1, started_prefix: 0 };
                let index = self.new_chain(chain);
                self.own_id(index, retry_id);
            }
        }
        Ok(())
    }

    /// Takes a refused record in where it most likely belongs, so the records after it are judged
    /// on their own: the open turn and step when the record names others, the routed provider
    /// when its own is unusable, its policy key (or, without one, the chain its retry id names).
    fn take_in_refused(&mut self, record: &Record<'_>) {
        let Some(placement) = self.placement(record) else { return };
        let (turn, step) = (self.scalar(&placement.turn), self.scalar(&placement.step));
        let retry_id = record.get("retryId").non_empty_str().map(str::to_owned);
        let provider = self.names.intern(placement.provider.as_deref().unwrap_or_default());
        let by_id = retry_id.as_deref().and_then(|text| self.ids.find(text)).map(|id| self.chain_of_id[id as usize]);
        let retry = record.get("retry").as_f64();
        let continues = |chain: u32| retry == Some(self.chains[chain as usize].last_retry as f64 + 1.0);
        // When the key and the id name different chains, one of the two fields is wrong: the
        // record belongs to the chain its retry number continues.
        let id_chain = by_id.filter(|chain| continues(*chain));
        let index = match placement.policy_key {
            Some(policy_key) => {
                let policy_key = self.names.intern(&policy_key);
                match self.find_chain(turn, step, provider, policy_key) {
                    Some(index) if id_chain.is_some_and(|other| other != index && !continues(index)) => {
                        id_chain.expect("checked")
                    }
                    Some(index) => index,
                    None if id_chain.is_some() => id_chain.expect("checked"),
                    None => self.new_chain(Chain {
                        turn,
                        step,
                        provider,
                        policy_key,
                        retry_id: NO_ID,
                        last_retry: 0,
                        started_prefix: 0,
                    }),
                }
            }
            None => match retry_id.as_deref().map(|text| self.ids.find(text)) {
                Some(Some(id)) => self.chain_of_id[id as usize],
                Some(None) => {
                    // No usable policy key: a chain of its own, found by its retry id alone.
                    let no_key = self.names.intern("");
                    self.new_chain(Chain {
                        turn,
                        step,
                        provider,
                        policy_key: no_key,
                        retry_id: NO_ID,
                        last_retry: 0,
                        started_prefix: 0,
                    })
                }
                None => return,
            },
        };
        self.chains[index as usize].last_retry += 1;
        let unowned = self.chains[index as usize].retry_id == NO_ID;
        if let Some(text) = retry_id.filter(|text| unowned && self.ids.find(text).is_none()) {
            self.own_id(index, &text);
        }
    }

    fn placement<'a>(&self, record: &Record<'a>) -> Option<Placement<'a>> {
        let (open_turn, open_step) = match (&self.open_turn, &self.open_step) {
            (Some(turn), Some((_, step))) => (turn, step),
            _ => return None,
        };
        let pick = |own: JsValue<'a>, open: &JsValue<'static>| {
            if own.strict_equals(open) {
                own
            } else {
                open.clone()
            }
        };
        let routed = self.routed_provider();
        let provider = match record.get("provider") {
            own if own.non_empty_str().is_some() && (own.strict_equals(&routed) || routed.as_str().is_none()) => {
                own.as_str().map(str::to_owned)
            }
            _ => routed.as_str().map(str::to_owned),
        };
        // A key with escapes (every real one: `["normal",5,…]`) is parsed into an owned string.
        let policy_key = match record.get("policyKey") {
            JsValue::String(key) if !key.is_empty() => Some(key),
            _ => None,
        };
        Some(Placement {
            turn: pick(record.get("turn"), open_turn),
            step: pick(record.get("step"), open_step),
            provider,
            policy_key,
        })
    }

    fn started(&mut self, record: &Record<'_>) -> Result<(), String> {
        let Some(retry_id) = record.get("retryId").non_empty_str().map(str::to_owned) else {
            return Err("llm/retry-started retryId must be a non-empty string".to_owned());
        };
        let retry = record.get("retry").safe_integer().filter(|retry| *retry >= 1.0).map(|retry| retry as u64);
        let scheduled = match self.ids.find(&retry_id) {
            Some(id) => Some((id, self.chain_of_id[id as usize])),
            None => self.adopt_id(record, &retry_id),
        };
        let Some((id, index, retry)) = scheduled
            .zip(retry)
            .filter(|((_, index), retry)| *retry <= self.chains[*index as usize].last_retry)
            .map(|((id, index), retry)| (id, index, retry))
        else {
            return Err("llm/retry-started pairs no prior scheduled attempt".to_owned());
        };
        let (turn, step) = (self.scalar(&record.get("turn")), self.scalar(&record.get("step")));
        let chain = self.chains[index as usize];
        if turn != chain.turn || step != chain.step || turn == Scalar::UNIQUE || step == Scalar::UNIQUE {
            return Err("llm/retry-started turn/step must match its scheduled attempt".to_owned());
        }
        if retry <= chain.started_prefix || self.started_out_of_order.contains(&(id, retry)) {
            return Err("llm/retry-started repeats one scheduled attempt".to_owned());
        }
        if retry == chain.started_prefix + 1 {
            let mut prefix = retry;
            while self.started_out_of_order.remove(&(id, prefix + 1)) {
                prefix += 1;
            }
            self.chains[index as usize].started_prefix = prefix;
        } else {
            self.started_out_of_order.insert((id, retry));
        }
        Ok(())
    }

    /// A start whose id no record owns pairs with a chain of its turn and step that a refused
    /// record (one without a usable id) opened; the chain takes the id, so the refused record
    /// gives one message and its start none.
    fn adopt_id(&mut self, record: &Record<'_>, retry_id: &str) -> Option<(u32, u32)> {
        let (turn, step) = (self.scalar(&record.get("turn")), self.scalar(&record.get("step")));
        let index = self
            .chains
            .iter()
            .rposition(|chain| chain.retry_id == NO_ID && chain.turn == turn && chain.step == step)?;
        let index = u32::try_from(index).ok()?;
        self.own_id(index, retry_id);
        Some((self.chains[index as usize].retry_id, index))
    }

    /// How many chains the checker holds (for memory figures).
    pub fn chain_count(&self) -> usize {
        self.chains.len()
    }

    /// How many retry ids the checker holds.
    pub fn id_count(&self) -> usize {
        self.ids.len()
    }
}

/// `data.header.config.provider` of a `request/header` (`undefined` where a level is missing).
fn header_provider(data: &str) -> JsValue<'static> {
    let level = |value: JsValue<'_>, key: &str| value.fields().map(|fields| fields.get(key).into_owned());
    JsValue::parse(data)
        .and_then(|data| level(data, "header"))
        .and_then(|header| level(header, "config"))
        .and_then(|config| level(config, "provider"))
        .unwrap_or(JsValue::Undefined)
}

fn check_failure(failure: &JsValue<'_>) -> Result<(), String> {
    let Some(fields) = failure.fields() else {
        return Err("llm/retry failure must be an object".to_owned());
    };
    if fields.get("message").non_empty_str().is_none() {
        return Err("llm/retry failure.message must be a non-empty string".to_owned());
    }
    if fields.get("code").non_empty_str().is_none() {
        return Err("llm/retry failure.code must be a non-empty string".to_owned());
    }
    let status = fields.get("status");
    if !status.is_undefined() {
        let integral = status.as_f64().filter(|s| s.fract() == 0.0 && (100.0..=599.0).contains(s));
        if integral.is_none() {
            return Err("llm/retry failure.status must be an integer from 100 through 599 when present".to_owned());
        }
    }
    let hint = fields.get("providerRetryAfterMs");
    if !hint.is_undefined() && !hint.as_f64().is_some_and(|hint| hint.is_finite() && hint > 0.0) {
        return Err("llm/retry failure.providerRetryAfterMs must be a positive finite number when present".to_owned());
    }
    let request_id = fields.get("requestId");
    if !request_id.is_undefined() && request_id.non_empty_str().is_none() {
        return Err("llm/retry failure.requestId must be a non-empty string when present".to_owned());
    }
    Ok(())
}

/// The fields of an `llm/retry` record that stand on their own, checked in the reference's order.
/// Its texts borrow the record's (an escaped string is the only one copied).
struct RetryFields<'a> {
    retry_id: Cow<'a, str>,
    retry: f64,
    provider: Cow<'a, str>,
    policy_key: Cow<'a, str>,
}

/// A string value that is not empty.
fn non_empty_text(value: JsValue<'_>) -> Option<Cow<'_, str>> {
    match value {
        JsValue::String(text) if !text.is_empty() => Some(text),
        _ => None,
    }
}

impl<'a> RetryFields<'a> {
    fn check(record: &Record<'a>) -> Result<RetryFields<'a>, String> {
        let Some(retry_id) = non_empty_text(record.get("retryId")) else {
            return Err("llm/retry retryId must be a non-empty string".to_owned());
        };
        check_failure(&record.get("failure"))?;
        let retry_value = record.get("retry");
        let retry = match retry_value.safe_integer() {
            Some(retry) if retry >= 1.0 => retry,
            _ => return Err("llm/retry retry must be a positive safe integer".to_owned()),
        };
        let Some(provider) = non_empty_text(record.get("provider")) else {
            return Err("llm/retry provider must be a non-empty string".to_owned());
        };
        let Some(policy_key) = non_empty_text(record.get("policyKey")) else {
            return Err("llm/retry policyKey must be a non-empty string".to_owned());
        };
        check_mode(record, retry, &retry_value)?;
        let delay = record.get("delayMs").as_f64();
        if !delay.is_some_and(|delay| delay.is_finite() && (0.0..=MAX_DELAY_MS).contains(&delay)) {
            return Err("llm/retry delayMs must be a finite number within 0..2147483647".to_owned());
        }
        Ok(RetryFields { retry_id, retry, provider, policy_key })
    }
}

/// `normal` bounds the retry by a positive `maxRetries`; `always` has none.
fn check_mode(record: &Record<'_>, retry: f64, retry_value: &JsValue<'_>) -> Result<(), String> {
    match record.get("mode").as_str() {
        Some("normal") => {
            let max_retries = record.get("maxRetries");
            let bound = max_retries.safe_integer().filter(|max| *max >= 1.0);
            if bound.is_none_or(|max| retry > max) {
                return Err(format!(
                    "llm/retry retry {} must not exceed a positive safe maxRetries {}",
                    retry_value.display(),
                    max_retries.display()
                ));
            }
            Ok(())
        }
        Some("always") if record.fields.contains("maxRetries") => {
            Err("llm/retry always mode must omit maxRetries".to_owned())
        }
        Some("always") => Ok(()),
        _ => Err(format!("llm/retry mode must be normal or always, got {}", record.get("mode").display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chain_entry_takes_48_bytes() {
        assert_eq!(std::mem::size_of::<Chain>(), 48);
    }

    fn run(events: &[(&str, &str)]) -> Vec<(usize, String)> {
        let mut checker = RetryChecker::default();
        events
            .iter()
            .enumerate()
            .filter_map(|(seq, (event_type, data))| checker.check(event_type, data).err().map(|message| (seq, message)))
            .collect()
    }

    const RETRY_1: &str = r#"{"retryId":"c","turn":1,"step":1,"provider":"mock","mode":"normal","policyKey":"k","retry":1,"maxRetries":2,"delayMs":1,"failure":{"message":"m","code":"SERVER"}}"#;

    #[test]
    fn a_valid_record_after_a_header_is_accepted_and_its_start_pairs() {
        let found = run(&[
            ("turn/start", r#"{"turn":1}"#),
            ("step/start", r#"{"turn":1,"step":1}"#),
            (
                "request/header",
                r#"{"header":{"config":{"provider":"mock","model":"m"},"system":"long"},"reason":"initial"}"#,
            ),
            ("llm/retry", RETRY_1),
            ("llm/retry-started", r#"{"retryId":"c","turn":1,"step":1,"retry":1}"#),
            ("llm/retry-started", r#"{"retryId":"c","turn":1,"step":1,"retry":1}"#),
        ]);
        assert_eq!(found, [(5, "llm/retry-started repeats one scheduled attempt".to_owned())]);
    }

    #[test]
    fn a_refused_record_is_taken_in_so_the_rest_of_its_chain_is_judged_on_its_own() {
        let found = run(&[
            ("turn/start", r#"{"turn":1}"#),
            ("step/start", r#"{"turn":1,"step":1}"#),
            ("request/header", r#"{"header":{"config":{"provider":"mock"}}}"#),
            ("llm/retry", &RETRY_1.replace("\"delayMs\":1", "\"delayMs\":-1")),
            ("llm/retry-started", r#"{"retryId":"c","turn":1,"step":1,"retry":1}"#),
            ("llm/retry", &RETRY_1.replace("\"retry\":1", "\"retry\":2")),
            ("llm/retry-started", r#"{"retryId":"c","turn":1,"step":1,"retry":2}"#),
        ]);
        assert_eq!(found, [(3, "llm/retry delayMs must be a finite number within 0..2147483647".to_owned())]);
    }

    #[test]
    fn one_corrupted_field_gives_one_message() {
        let chain = |retry: u64, record: &str| {
            [
                ("llm/retry", record.replace("\"retry\":1", &format!("\"retry\":{retry}"))),
                ("llm/retry-started", format!(r#"{{"retryId":"c","turn":1,"step":1,"retry":{retry}}}"#)),
            ]
        };
        for (field, corrupted) in [
            ("retryId", RETRY_1.replace("\"retryId\":\"c\"", "\"retryId\":\"\"")),
            ("turn", RETRY_1.replace("\"turn\":1", "\"turn\":2")),
            ("step", RETRY_1.replace("\"step\":1", "\"step\":\"1\"")),
            ("provider", RETRY_1.replace("\"provider\":\"mock\"", "\"provider\":\"other\"")),
            ("policyKey", RETRY_1.replace("\"policyKey\":\"k\"", "\"policyKey\":\"\"")),
            ("maxRetries", RETRY_1.replace("\"maxRetries\":2", "\"maxRetries\":0")),
            ("failure", RETRY_1.replace("\"code\":\"SERVER\"", "\"code\":5")),
        ] {
            let mut events: Vec<(&str, String)> = vec![
                ("turn/start", r#"{"turn":1}"#.to_owned()),
                ("step/start", r#"{"turn":1,"step":1}"#.to_owned()),
                ("request/header", r#"{"header":{"config":{"provider":"mock"}}}"#.to_owned()),
            ];
            events.extend(chain(1, RETRY_1));
            events.extend(chain(2, &corrupted.replace("\"retry\":1", "\"retry\":2")));
            events.extend(chain(3, &RETRY_1.replace("\"maxRetries\":2", "\"maxRetries\":5")));
            let borrowed: Vec<(&str, &str)> = events.iter().map(|(t, d)| (*t, d.as_str())).collect();
            let found = run(&borrowed);
            assert_eq!(found.len(), 1, "{field}: {found:?}");
            assert_eq!(found[0].0, 5, "{field}: {found:?}");
        }
    }

    /// Real policy keys hold escaped quotes, and a chain's first record may be the bad one.
    #[test]
    fn a_bad_first_record_with_a_real_policy_key_gives_one_message() {
        let keyed = RETRY_1.replace("\"policyKey\":\"k\"", r#""policyKey":"[\"normal\",2]""#);
        for (bad, message) in [
            (keyed.replace("\"retryId\":\"c\"", "\"retryId\":\"\""), "llm/retry retryId must be a non-empty string"),
            (
                keyed.replace("\"delayMs\":1", "\"delayMs\":2147483647.0000002"),
                "llm/retry delayMs must be a finite number within 0..2147483647",
            ),
        ] {
            let found = run(&[
                ("turn/start", r#"{"turn":1}"#),
                ("step/start", r#"{"turn":1,"step":1}"#),
                ("request/header", r#"{"header":{"config":{"provider":"mock"}}}"#),
                ("llm/retry", &bad),
                ("llm/retry-started", r#"{"retryId":"c","turn":1,"step":1,"retry":1}"#),
                ("llm/retry", &keyed.replace("\"retry\":1", "\"retry\":2")),
                ("llm/retry-started", r#"{"retryId":"c","turn":1,"step":1,"retry":2}"#),
            ]);
            assert_eq!(found, [(3, message.to_owned())]);
        }
    }

    #[test]
    fn unrelated_events_are_not_parsed() {
        assert!(run(&[("assistant/chunk", "not json at all"), ("agent/inbox/spliced", "{")]).is_empty());
    }

    /// A log generated from a model of correct executors, and single-field mutations of it,
    /// checked against a naive transcription of the rules that rescans the whole history for
    /// every record (the reference's quadratic algorithm, with refused records left out).
    mod model {
        use super::*;
        use dsh_abi::js;
        use proptest::prelude::*;
        use serde_json::{json, Value};

        fn non_empty_string(value: Option<&Value>) -> Option<&str> {
            value.and_then(Value::as_str).filter(|text| !text.is_empty())
        }

        /// The failure rules, transcribed over `serde_json::Value`.
        fn check_failure(failure: Option<&Value>) -> Result<(), String> {
            let Some(failure) = failure.filter(|value| value.is_object() || value.is_array()) else {
                return Err("llm/retry failure must be an object".into());
            };
            let field = |key: &str| failure.get(key);
            if non_empty_string(field("message")).is_none() {
                return Err("llm/retry failure.message must be a non-empty string".into());
            }
            if non_empty_string(field("code")).is_none() {
                return Err("llm/retry failure.code must be a non-empty string".into());
            }
            if let Some(status) = field("status") {
                if !status.as_f64().is_some_and(|s| s.fract() == 0.0 && (100.0..=599.0).contains(&s)) {
                    return Err("llm/retry failure.status must be an integer from 100 through 599 when present".into());
                }
            }
            Ok(())
        }

        struct Event {
            event_type: &'static str,
            data: Value,
        }

        #[derive(Debug, Clone)]
        struct Chain {
            provider_index: usize,
            policy: usize,
            always: bool,
            max_retries: u64,
            failures: u64,
        }

        const PROVIDERS: [&str; 2] = ["alpha", "beta"];
        const POLICIES: [&str; 3] = ["k1", "k2", "k3"];

        /// Turns of steps; each step has one provider and some chains of failures.
        fn sessions() -> impl Strategy<Value = Vec<Vec<(usize, Vec<Chain>)>>> {
            let chain = (0..2usize, 0..3usize, any::<bool>(), 1..4u64, 1..5u64).prop_map(
                |(provider_index, policy, always, max_retries, failures)| Chain {
                    provider_index,
                    policy,
                    always,
                    max_retries,
                    failures,
                },
            );
            let step = (0..2usize, prop::collection::vec(chain, 0..3));
            prop::collection::vec(prop::collection::vec(step, 1..3), 1..3)
        }

        fn generate(turns: &[Vec<(usize, Vec<Chain>)>]) -> Vec<Event> {
            let mut events = Vec::new();
            let mut next_id = 0;
            let push = |events: &mut Vec<Event>, event_type, data| events.push(Event { event_type, data });
            for (turn_index, steps) in turns.iter().enumerate() {
                let turn = turn_index + 1;
                push(&mut events, "turn/start", json!({"turn": turn}));
                for (step_index, (provider_index, chains)) in steps.iter().enumerate() {
                    let step = step_index + 1;
                    let provider = PROVIDERS[*provider_index];
                    push(&mut events, "step/start", json!({"turn": turn, "step": step}));
                    push(
                        &mut events,
                        "request/header",
                        json!({"header": {"config": {"provider": provider}}, "reason": "initial"}),
                    );
                    let mut keys_in_step = HashSet::new();
                    for chain in chains.iter().filter(|chain| chain.provider_index == *provider_index) {
                        // Quoted as real keys are (`["normal",5,…]`), so the JSON holds escapes.
                        let mode = if chain.always { "always" } else { "normal" };
                        let policy_key = format!("[\"{mode}\",\"{}\"]", POLICIES[chain.policy]);
                        if !keys_in_step.insert(policy_key.clone()) {
                            continue;
                        }
                        next_id += 1;
                        let count = if chain.always { chain.failures } else { chain.failures.min(chain.max_retries) };
                        for retry in 1..=count {
                            let mut record = json!({
                                "retryId": format!("r{next_id}"), "turn": turn, "step": step, "provider": provider,
                                "mode": if chain.always { "always" } else { "normal" }, "policyKey": policy_key, "retry": retry,
                            });
                            if !chain.always {
                                record["maxRetries"] = json!(chain.max_retries);
                            }
                            record["delayMs"] = json!(500);
                            record["failure"] = json!({"message": "busy", "code": "SERVER", "status": 503});
                            push(&mut events, "llm/retry", record);
                            push(
                                &mut events,
                                "llm/retry-started",
                                json!({"retryId": format!("r{next_id}"), "turn": turn, "step": step, "retry": retry}),
                            );
                        }
                    }
                    push(&mut events, "step/end", json!({"turn": turn, "step": step}));
                }
                push(&mut events, "turn/end", json!({"turn": turn, "reason": {"kind": "completed"}}));
            }
            events
        }

        fn streaming(events: &[Event]) -> Vec<(usize, String)> {
            let mut checker = RetryChecker::default();
            events
                .iter()
                .enumerate()
                .filter_map(|(seq, event)| {
                    checker.check(event.event_type, &event.data.to_string()).err().map(|message| (seq, message))
                })
                .collect()
        }

        fn naive(events: &[Event]) -> Vec<(usize, String)> {
            let mut history: Vec<&Event> = Vec::new();
            let mut found = Vec::new();
            for (seq, event) in events.iter().enumerate() {
                let verdict = match event.event_type {
                    "llm/retry" => naive_retry(&history, &event.data),
                    "llm/retry-started" => naive_started(&history, &event.data),
                    _ => Ok(()),
                };
                match verdict {
                    Ok(()) => history.push(event),
                    Err(message) => found.push((seq, message)),
                }
            }
            found
        }

        fn last<'a>(history: &[&'a Event], types: &[&str]) -> Option<&'a Event> {
            history.iter().rev().find(|event| types.contains(&event.event_type)).copied()
        }

        fn eq(a: Option<&Value>, b: Option<&Value>) -> bool {
            js::strict_equals(a, b)
        }

        fn naive_retry(history: &[&Event], data: &Value) -> Result<(), String> {
            naive_retry_fields(data)?;
            naive_retry_place(history, data)?;
            naive_retry_chain(history, data)
        }

        fn naive_retry_fields(data: &Value) -> Result<(), String> {
            let get = |key: &str| data.get(key);
            if non_empty_string(get("retryId")).is_none() {
                return Err("llm/retry retryId must be a non-empty string".into());
            }
            check_failure(get("failure"))?;
            let retry = get("retry").and_then(Value::as_f64).filter(|r| js::is_safe_integer(*r) && *r >= 1.0);
            let Some(retry) = retry else { return Err("llm/retry retry must be a positive safe integer".into()) };
            if non_empty_string(get("provider")).is_none() {
                return Err("llm/retry provider must be a non-empty string".into());
            }
            if non_empty_string(get("policyKey")).is_none() {
                return Err("llm/retry policyKey must be a non-empty string".into());
            }
            match get("mode").and_then(Value::as_str) {
                Some("normal") => {
                    let max =
                        get("maxRetries").and_then(Value::as_f64).filter(|m| js::is_safe_integer(*m) && *m >= 1.0);
                    if max.is_none_or(|max| retry > max) {
                        return Err(format!(
                            "llm/retry retry {} must not exceed a positive safe maxRetries {}",
                            js::number(retry),
                            js::display(get("maxRetries"))
                        ));
                    }
                }
                Some("always") if get("maxRetries").is_some() => {
                    return Err("llm/retry always mode must omit maxRetries".into())
                }
                Some("always") => {}
                _ => return Err(format!("llm/retry mode must be normal or always, got {}", js::display(get("mode")))),
            }
            if !get("delayMs").and_then(Value::as_f64).is_some_and(|d| (0.0..=MAX_DELAY_MS).contains(&d)) {
                return Err("llm/retry delayMs must be a finite number within 0..2147483647".into());
            }
            Ok(())
        }

        fn naive_retry_place(history: &[&Event], data: &Value) -> Result<(), String> {
            let get = |key: &str| data.get(key);
            let turn_boundary =
                last(history, &["turn/start", "turn/end"]).filter(|event| event.event_type == "turn/start");
            let Some(turn_boundary) = turn_boundary else {
                return Err("llm/retry must be appended inside an open turn".into());
            };
            if !eq(get("turn"), turn_boundary.data.get("turn")) {
                return Err(format!(
                    "llm/retry names turn {}, but the open turn is {}",
                    js::display(get("turn")),
                    js::display(turn_boundary.data.get("turn"))
                ));
            }
            let step_boundary =
                last(history, &["step/start", "step/end"]).filter(|event| event.event_type == "step/start");
            let Some(step_boundary) = step_boundary else {
                return Err("llm/retry must be appended inside an open step".into());
            };
            if !eq(get("step"), step_boundary.data.get("step")) || !eq(get("turn"), step_boundary.data.get("turn")) {
                return Err(format!(
                    "llm/retry names turn {}/step {}, but the open step is {}/{}",
                    js::display(get("turn")),
                    js::display(get("step")),
                    js::display(step_boundary.data.get("turn")),
                    js::display(step_boundary.data.get("step"))
                ));
            }
            let start = history.iter().rposition(|event| {
                event.event_type == "step/start"
                    && eq(event.data.get("turn"), get("turn"))
                    && eq(event.data.get("step"), get("step"))
            });
            let routed = start
                .filter(|start| {
                    !history[start + 1..].iter().any(|event| matches!(event.event_type, "step/end" | "turn/end"))
                })
                .and_then(|_| last(history, &["request/header"]))
                .and_then(|header| header.data.get("header")?.get("config")?.get("provider"));
            if !eq(get("provider"), routed) {
                return Err(format!(
                    "llm/retry provider {} does not match the failed request provider {}",
                    js::display(get("provider")),
                    js::display(routed)
                ));
            }
            Ok(())
        }

        fn naive_retry_chain(history: &[&Event], data: &Value) -> Result<(), String> {
            let get = |key: &str| data.get(key);
            let retry = get("retry").and_then(Value::as_f64).unwrap_or_default();
            let prior = history.iter().rev().find(|event| {
                event.event_type == "llm/retry"
                    && ["turn", "step", "provider", "policyKey"].iter().all(|key| eq(event.data.get(*key), get(key)))
            });
            let expected = prior.map_or(1.0, |prior| prior.data["retry"].as_f64().unwrap() + 1.0);
            if retry != expected {
                return Err(format!(
                    "llm/retry retry {} must equal provider policy retry {}",
                    js::number(retry),
                    js::number(expected)
                ));
            }
            match prior {
                Some(prior) if !eq(prior.data.get("retryId"), get("retryId")) => {
                    Err("llm/retry must preserve retryId across one provider-policy chain".into())
                }
                None if history.iter().any(|event| {
                    matches!(event.event_type, "llm/retry" | "llm/retry-started")
                        && eq(event.data.get("retryId"), get("retryId"))
                }) =>
                {
                    Err(format!("llm/retry retryId {} is already owned by another chain", get("retryId").unwrap()))
                }
                _ => Ok(()),
            }
        }

        fn naive_started(history: &[&Event], data: &Value) -> Result<(), String> {
            if non_empty_string(data.get("retryId")).is_none() {
                return Err("llm/retry-started retryId must be a non-empty string".into());
            }
            let same_attempt = |event: &&&Event| {
                eq(event.data.get("retryId"), data.get("retryId")) && eq(event.data.get("retry"), data.get("retry"))
            };
            let Some(scheduled) =
                history.iter().rev().filter(|event| event.event_type == "llm/retry").find(same_attempt)
            else {
                return Err("llm/retry-started pairs no prior scheduled attempt".into());
            };
            if !eq(scheduled.data.get("turn"), data.get("turn")) || !eq(scheduled.data.get("step"), data.get("step")) {
                return Err("llm/retry-started turn/step must match its scheduled attempt".into());
            }
            if history.iter().filter(|event| event.event_type == "llm/retry-started").any(|event| same_attempt(&event))
            {
                return Err("llm/retry-started repeats one scheduled attempt".into());
            }
            Ok(())
        }

        fn mutation_value() -> impl Strategy<Value = Value> {
            prop_oneof![
                Just(Value::Null),
                Just(json!("")),
                Just(json!("r1")),
                Just(json!("alpha")),
                Just(json!("beta")),
                Just(json!("k1-normal")),
                Just(json!("always")),
                Just(json!("sometimes")),
                Just(json!("1")),
                Just(json!(1.5)),
                Just(json!({})),
                (0..5i64).prop_map(|n| json!(n)),
                Just(json!(-1)),
                Just(json!(2147483648u64)),
            ]
        }

        const FIELDS: [&str; 12] = [
            "retryId",
            "turn",
            "step",
            "provider",
            "mode",
            "policyKey",
            "retry",
            "maxRetries",
            "delayMs",
            "failure",
            "status",
            "<remove maxRetries>",
        ];

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(512))]

            #[test]
            fn a_log_of_correct_executors_passes(turns in sessions()) {
                let events = generate(&turns);
                prop_assert_eq!(streaming(&events), vec![]);
            }

            #[test]
            fn a_mutated_retry_field_gives_the_first_violation_of_the_naive_rules_and_no_cascade(
                turns in sessions(), pick in any::<prop::sample::Index>(), field in prop::sample::select(FIELDS.to_vec()), value in mutation_value(),
            ) {
                let mut events = generate(&turns);
                let retries: Vec<usize> = events.iter().enumerate().filter(|(_, e)| e.event_type.starts_with("llm/retry")).map(|(i, _)| i).collect();
                prop_assume!(!retries.is_empty());
                let target = &mut events[retries[pick.index(retries.len())]].data;
                match field {
                    "<remove maxRetries>" => { target.as_object_mut().unwrap().remove("maxRetries"); }
                    "status" => { if let Some(failure) = target.get_mut("failure").and_then(Value::as_object_mut) { failure.insert("status".into(), value); } }
                    key => { target[key] = value; }
                }
                let (streamed, naively) = (streaming(&events), naive(&events));
                prop_assert_eq!(streamed.first(), naively.first(), "the first violation is the reference's");
                prop_assert!(streamed.len() <= naively.len(), "a refused record caused a cascade: {:?} vs {:?}", streamed, naively);
            }
        }
    }
}
