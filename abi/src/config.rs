//! One declaration per config key: a row's [`Schema`] lists each key once (name, kind, default,
//! meaning), and that list yields the manifest's docs, the unknown-key check (with a did-you-mean
//! for near misses) and the checks of every value, all reported in one pass and in one style:
//! `<key path>` + `must be <what>, got <value>`.
//!
//! ```
//! use dsh_abi::config::{Key, Kind, Schema};
//!
//! const SCHEMA: Schema = Schema::plugin("my-plugin", &[
//!     Key::new("tailDelayMs", Kind::integer(0, 2_147_483_647), "20000", "wait before every late retry"),
//!     Key::new("respectRetryAfter", Kind::Flag, "false", "use the provider's hint as a floor"),
//! ]);
//!
//! let config = serde_json::json!({"tailDelayMs": 500, "respectretryafter": true});
//! let mut row = SCHEMA.read(&config).unwrap();
//! let tail = row.integer("tailDelayMs");
//! let errors = row.finish(tail).unwrap_err();
//! assert_eq!(errors[0].path.as_str(), "respectretryafter");
//! assert_eq!(
//!     errors[0].message.as_str(),
//!     "my-plugin: unknown key \"respectretryafter\" (did you mean \"respectRetryAfter\"?)"
//! );
//! ```

use std::borrow::Cow;

use abi_stable::std_types::RVec;
use serde_json::{Map, Value};

use crate::js;
use crate::types::{ConfigError, ConfigKey};

/// The largest integer a JSON number holds exactly (JavaScript's `Number.MAX_SAFE_INTEGER`).
pub const MAX_SAFE_INTEGER: u64 = 9_007_199_254_740_991;

/// The config key in which a row with the [`Hooks::COUNTERS`](crate::Hooks::COUNTERS) capability
/// names its counter store (declare it with [`Kind::CounterStore`]); the host opens the store.
pub const COUNTER_STORE_KEY: &str = "store";

/// The config key in which a row with the [`Hooks::ROUTES`](crate::Hooks::ROUTES) capability lists
/// provider routes by name; the host checks each is served by an enabled provider row.
pub const ROUTES_KEY: &str = "routes";

/// What a key holds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Kind {
    /// `true` or `false`.
    Flag,
    /// A whole number in `min..=max`.
    Integer { min: u64, max: u64 },
    /// A finite number, at least `min` (or above it, when `min_exclusive`) and at most `max`.
    Number { min: f64, min_exclusive: bool, max: f64 },
    /// A string that is not blank.
    Text,
    /// One of these strings.
    Choice(&'static [&'static str]),
    /// A list; its items are the row's to check.
    List,
    /// A mapping; its keys are the row's to check (often with a schema of their own).
    Mapping,
    /// Any value; the row checks it.
    Any,
    /// A key that belongs elsewhere: refused, with this reason, whatever it holds.
    Misplaced(&'static str),
    /// Where shared counters are kept: `memory` (this process), `machine` (every dsh process of
    /// the machine) or `redis://HOST:PORT` (a fleet). Only under [`COUNTER_STORE_KEY`].
    CounterStore,
}

impl Kind {
    /// A whole number in `min..=max`.
    pub const fn integer(min: u64, max: u64) -> Kind {
        Kind::Integer { min, max }
    }

    /// A finite number in `min..=max`.
    pub const fn number(min: f64, max: f64) -> Kind {
        Kind::Number { min, min_exclusive: false, max }
    }

    /// A finite number above `min` and at most `max`.
    pub const fn number_above(min: f64, max: f64) -> Kind {
        Kind::Number { min, min_exclusive: true, max }
    }

    /// What a value must be, as the messages and docs say it.
    pub fn describe(&self) -> String {
        match self {
            Kind::Flag => "true or false".to_owned(),
            Kind::Integer { min: 0, max: MAX_SAFE_INTEGER } => "a non-negative safe integer".to_owned(),
            Kind::Integer { min, max } => format!("an integer from {min} to {max}"),
            Kind::Number { min, min_exclusive: false, max } => {
                format!("a number from {} to {}", js::number(*min), js::number(*max))
            }
            Kind::Number { min, min_exclusive: true, max } => {
                format!("a number above {} and at most {}", js::number(*min), js::number(*max))
            }
            Kind::Text => "a non-empty string".to_owned(),
            Kind::Choice(options) => choice_words(options),
            Kind::List => "a list".to_owned(),
            Kind::Mapping => "a mapping".to_owned(),
            Kind::Any => "any value".to_owned(),
            Kind::Misplaced(reason) => (*reason).to_owned(),
            Kind::CounterStore => "\"memory\", \"machine\" or a redis://HOST:PORT URL".to_owned(),
        }
    }

    /// Whether `value` is of this kind.
    pub fn admits(&self, value: &Value) -> bool {
        match self {
            Kind::Flag => value.is_boolean(),
            Kind::Integer { min, max } => js::as_safe_u64(value).is_some_and(|n| (*min..=*max).contains(&n)),
            Kind::Number { min, min_exclusive, max } => value.as_f64().is_some_and(|n| {
                let above_min = if *min_exclusive { n > *min } else { n >= *min };
                n.is_finite() && above_min && n <= *max
            }),
            Kind::Text => value.as_str().is_some_and(|text| !text.trim().is_empty()),
            Kind::Choice(options) => value.as_str().is_some_and(|text| options.contains(&text)),
            Kind::List => value.is_array(),
            Kind::Mapping => value.is_object(),
            Kind::Any => true,
            Kind::Misplaced(_) => false,
            Kind::CounterStore => value.as_str().is_some_and(|store| {
                matches!(store, "memory" | "machine") || store.starts_with("redis://") || store.starts_with("rediss://")
            }),
        }
    }
}

fn choice_words(options: &[&str]) -> String {
    let quoted: Vec<String> = options.iter().map(|option| format!("\"{option}\"")).collect();
    match quoted.as_slice() {
        [] => "nothing".to_owned(),
        [one] => one.clone(),
        [head @ .., last] if head.len() == 1 => format!("{} or {last}", head[0]),
        [head @ .., last] => format!("one of {}, or {last}", head.join(", ")),
    }
}

/// One key of a row config.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Key {
    pub name: &'static str,
    pub kind: Kind,
    /// The default as JSON text (`"20000"`, `"[\"SERVER\"]"`); empty when the key has none.
    pub default: &'static str,
    /// What the key means, in a phrase.
    pub doc: &'static str,
    /// The exact message for a value of the wrong kind, where a reference implementation pins
    /// one; otherwise `must be <kind>, got <value>`.
    pub refusal: Option<&'static str>,
}

impl Key {
    pub const fn new(name: &'static str, kind: Kind, default: &'static str, doc: &'static str) -> Key {
        Key { name, kind, default, doc, refusal: None }
    }

    /// The same key, refusing a value of the wrong kind with exactly `message`.
    pub const fn refused_as(mut self, message: &'static str) -> Key {
        self.refusal = Some(message);
        self
    }

    fn default_value(&self) -> Option<Value> {
        if self.default.is_empty() {
            return None;
        }
        let parsed = serde_json::from_str(self.default);
        Some(parsed.unwrap_or_else(|err| panic!("key {}: default {:?} is not JSON: {err}", self.name, self.default)))
    }

    /// One line for `dsh plugin inspect`: meaning, kind and default.
    pub fn summary(&self) -> String {
        match (&self.kind, self.default) {
            (Kind::Misplaced(reason), _) => format!("refused: {reason}"),
            (kind, "") => format!("{} ({})", self.doc, kind.describe()),
            (kind, default) => format!("{} ({}; default {default})", self.doc, kind.describe()),
        }
    }
}

/// Every key of one row config.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Schema {
    /// The plugin (or built-in row) the config belongs to.
    pub name: &'static str,
    pub keys: &'static [Key],
    /// Whether messages start with `<name>: `, as plugins' messages do (a built-in row's are
    /// already named by the row).
    pub prefixed: bool,
}

impl Schema {
    /// A plugin's schema: its messages start with `<name>: `.
    pub const fn plugin(name: &'static str, keys: &'static [Key]) -> Schema {
        Schema { name, keys, prefixed: true }
    }

    /// A built-in row's schema (agent, provider routes): its messages are bare.
    pub const fn row(name: &'static str, keys: &'static [Key]) -> Schema {
        Schema { name, keys, prefixed: false }
    }

    /// The keys as the manifest lists them (misplaced keys are not the row's, so not listed).
    pub fn manifest_keys(&self) -> RVec<ConfigKey> {
        self.keys
            .iter()
            .filter(|key| !matches!(key.kind, Kind::Misplaced(_)))
            .map(|key| ConfigKey { name: key.name.into(), summary: key.summary().into() })
            .collect()
    }

    /// The key named `name`; a name the schema does not declare is a bug in the row's code.
    pub fn key(&self, name: &str) -> &'static Key {
        let keys: &'static [Key] = self.keys;
        keys.iter().find(|key| key.name == name).unwrap_or_else(|| panic!("{}: no key {name:?} declared", self.name))
    }

    /// What is wrong with the declaration itself: a default that is not JSON or not of its key's
    /// kind, a key declared twice. Every row's unit tests assert there is nothing.
    pub fn faults(&self) -> Vec<String> {
        let mut faults = Vec::new();
        for (index, key) in self.keys.iter().enumerate() {
            if !key.default.is_empty() {
                match serde_json::from_str::<Value>(key.default) {
                    Ok(default) if key.kind.admits(&default) => {}
                    Ok(_) => {
                        faults.push(format!("{}: default {} is not {}", key.name, key.default, key.kind.describe()))
                    }
                    Err(err) => faults.push(format!("{}: default {} is not JSON: {err}", key.name, key.default)),
                }
            }
            if key.kind == Kind::CounterStore && key.name != COUNTER_STORE_KEY {
                faults.push(format!("{}: a counter store is named under \"{COUNTER_STORE_KEY}\"", key.name));
            }
            if self.keys[..index].iter().any(|earlier| earlier.name == key.name) {
                faults.push(format!("{}: declared twice", key.name));
            }
        }
        faults
    }

    /// The message `text` in this schema's style.
    pub fn message(&self, text: impl std::fmt::Display) -> String {
        if self.prefixed {
            format!("{}: {text}", self.name)
        } else {
            text.to_string()
        }
    }

    /// Opens a config for reading: `null` is an empty config, anything but a mapping is refused;
    /// unknown and misplaced keys are found here, every other problem as the row reads its keys.
    pub fn read<'a>(&'static self, config: &'a Value) -> Result<Row<'a>, Vec<ConfigError>> {
        self.read_at("", config)
    }

    /// [`Schema::read`] for a mapping nested at `path` inside a row config.
    pub fn read_at<'a>(&'static self, path: &str, config: &'a Value) -> Result<Row<'a>, Vec<ConfigError>> {
        let object = match config {
            Value::Null => Cow::Owned(Map::new()),
            Value::Object(object) => Cow::Borrowed(object),
            _ if path.is_empty() => {
                return Err(vec![ConfigError::new("", self.message("configuration must be an object"))])
            }
            other => return Err(vec![ConfigError::new(path, self.message(format!("must be a mapping, got {other}")))]),
        };
        let mut row = Row { schema: self, base: path.to_owned(), object, errors: Vec::new() };
        row.check_names();
        Ok(row)
    }

    /// The declared key closest to `unknown`: the same but for case, or at most two edits away.
    pub fn closest(&self, unknown: &str) -> Option<&'static str> {
        let keys: &'static [Key] = self.keys;
        let lower = unknown.to_lowercase();
        keys.iter()
            .map(|key| (strsim::damerau_levenshtein(&lower, &key.name.to_lowercase()), key.name))
            .filter(|(distance, name)| *distance <= 2.min(name.len() / 3))
            .min_by_key(|(distance, _)| *distance)
            .map(|(_, name)| name)
    }
}

/// A row config being read: each read checks its key and notes what is wrong; [`Row::finish`]
/// hands back every problem at once.
#[derive(Debug)]
pub struct Row<'a> {
    schema: &'static Schema,
    base: String,
    object: Cow<'a, Map<String, Value>>,
    errors: Vec<ConfigError>,
}

impl<'a> Row<'a> {
    fn check_names(&mut self) {
        let schema = self.schema;
        let mut found = Vec::new();
        for name in self.object.keys() {
            let message = match schema.keys.iter().find(|key| key.name == name) {
                Some(Key { kind: Kind::Misplaced(reason), .. }) => (*reason).to_owned(),
                Some(_) => continue,
                None => match schema.closest(name) {
                    Some(near) => format!("unknown key \"{name}\" (did you mean \"{near}\"?)"),
                    None => format!("unknown key \"{name}\""),
                },
            };
            found.push((name.clone(), message));
        }
        for (name, message) in found {
            self.refuse(&name, message);
        }
    }

    /// The path of `key` (or `key[index]`) inside the whole row config.
    pub fn path(&self, key: &str) -> String {
        if self.base.is_empty() {
            key.to_owned()
        } else if key.is_empty() {
            self.base.clone()
        } else {
            format!("{}.{key}", self.base)
        }
    }

    /// Notes a problem at `key` (a path relative to this mapping), in the schema's style.
    pub fn refuse(&mut self, key: &str, text: impl std::fmt::Display) {
        let path = self.path(key);
        let message = self.schema.message(text);
        self.errors.push(ConfigError::new(path, message));
    }

    /// Whether the config sets `key`.
    pub fn is_set(&self, key: &str) -> bool {
        self.object.contains_key(self.schema.key(key).name)
    }

    /// The value of `key` as given (not its default).
    pub fn given(&self, key: &str) -> Option<&Value> {
        self.object.get(self.schema.key(key).name)
    }

    /// The value of `key`, or its default, once checked against its kind; `None` when it is
    /// unset without a default, or of the wrong kind (then noted).
    pub fn value(&mut self, key: &str) -> Option<Value> {
        let declared = self.schema.key(key);
        let Some(value) = self.object.get(key) else {
            return declared.default_value();
        };
        if declared.kind.admits(value) {
            return Some(value.clone());
        }
        let message = match declared.refusal {
            Some(exact) => exact.to_owned(),
            None => format!("must be {}, got {value}", declared.kind.describe()),
        };
        self.refuse(key, message);
        None
    }

    /// The value of `key`, or its default when it is unset or wrong (the problem is noted).
    fn value_or_default(&mut self, key: &str) -> Value {
        let default = self.schema.key(key).default_value();
        self.value(key).or(default).unwrap_or_else(|| panic!("{}: key {key:?} declares no default", self.schema.name))
    }

    /// A [`Kind::Flag`] key.
    pub fn flag(&mut self, key: &str) -> bool {
        self.value_or_default(key).as_bool().unwrap_or_default()
    }

    /// A [`Kind::Integer`] key.
    pub fn integer(&mut self, key: &str) -> u64 {
        js::as_safe_u64(&self.value_or_default(key)).unwrap_or_default()
    }

    /// A [`Kind::Number`] or [`Kind::Integer`] key.
    pub fn number(&mut self, key: &str) -> f64 {
        self.value_or_default(key).as_f64().unwrap_or_default()
    }

    /// A [`Kind::Text`] or [`Kind::Choice`] key, or `None` when it is unset without a default.
    pub fn text(&mut self, key: &str) -> Option<String> {
        self.value(key).and_then(|value| value.as_str().map(str::to_owned))
    }

    /// A [`Kind::List`] key's items (none when it is unset without a default, or not a list).
    pub fn list(&mut self, key: &str) -> Vec<Value> {
        match self.value(key) {
            Some(Value::Array(items)) => items,
            _ => Vec::new(),
        }
    }

    /// Takes in the problems of a nested mapping's row.
    pub fn absorb(&mut self, nested: Row<'_>) {
        self.errors.extend(nested.errors);
    }

    /// The problems noted so far.
    pub fn problems(&self) -> &[ConfigError] {
        &self.errors
    }

    /// `value` when nothing was wrong, else every problem, in the order found.
    pub fn finish<T>(self, value: T) -> Result<T, Vec<ConfigError>> {
        if self.errors.is_empty() {
            Ok(value)
        } else {
            Err(self.errors)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const KEYS: &[Key] = &[
        Key::new("maxTokens", Kind::integer(1, 1000), "10", "the bucket's size"),
        Key::new("tokenRatio", Kind::number_above(0.0, 1.0), "0.1", "tokens an answer gives back"),
        Key::new("key", Kind::Choice(&["route", "host"]), "\"route\"", "one bucket per route or host"),
        Key::new("retryPolicy", Kind::Misplaced("retryPolicy belongs under each provider configuration"), "", ""),
    ];
    const SCHEMA: Schema = Schema::plugin("budget", KEYS);

    fn problems(config: Value) -> Vec<(String, String)> {
        let mut row = SCHEMA.read(&config).map_err(|errors| errors[0].message.to_string()).unwrap();
        row.integer("maxTokens");
        row.number("tokenRatio");
        row.text("key");
        row.finish(()).unwrap_err().into_iter().map(|e| (e.path.into_string(), e.message.into_string())).collect()
    }

    #[test]
    fn defaults_come_from_the_declaration() {
        let mut row = SCHEMA.read(&Value::Null).unwrap();
        let read = (row.integer("maxTokens"), row.number("tokenRatio"), row.text("key"));
        assert_eq!(row.finish(read).unwrap(), (10, 0.1, Some("route".to_owned())));
    }

    #[test]
    fn every_problem_is_found_in_one_pass_in_one_style() {
        assert_eq!(
            problems(json!({"maxTokens": 0, "tokenRatio": 0, "key": "relay", "retrypolicy": 1, "colour": 1})),
            [
                (
                    "retrypolicy".to_owned(),
                    "budget: unknown key \"retrypolicy\" (did you mean \"retryPolicy\"?)".to_owned()
                ),
                ("colour".into(), "budget: unknown key \"colour\"".into()),
                ("maxTokens".into(), "budget: must be an integer from 1 to 1000, got 0".into()),
                ("tokenRatio".into(), "budget: must be a number above 0 and at most 1, got 0".into()),
                ("key".into(), "budget: must be \"route\" or \"host\", got \"relay\"".into()),
            ]
        );
    }

    #[test]
    fn a_misplaced_key_is_refused_with_its_reason() {
        assert_eq!(
            problems(json!({"retryPolicy": {}})),
            [("retryPolicy".to_owned(), "budget: retryPolicy belongs under each provider configuration".to_owned())]
        );
    }

    #[test]
    fn near_misses_are_named_and_far_ones_are_not() {
        assert_eq!(SCHEMA.closest("MAXTOKENS"), Some("maxTokens"));
        assert_eq!(SCHEMA.closest("maxToken"), Some("maxTokens"));
        assert_eq!(SCHEMA.closest("tokenRatios"), Some("tokenRatio"));
        assert_eq!(SCHEMA.closest("kye"), Some("key"));
        assert_eq!(SCHEMA.closest("store"), None);
        assert_eq!(SCHEMA.closest("colour"), None);
    }

    #[test]
    fn the_manifest_lists_each_key_with_kind_and_default() {
        let keys = SCHEMA.manifest_keys();
        assert_eq!(keys.len(), 3);
        assert_eq!(keys[0].summary.as_str(), "the bucket's size (an integer from 1 to 1000; default 10)");
        assert_eq!(keys[2].summary.as_str(), "one bucket per route or host (\"route\" or \"host\"; default \"route\")");
    }

    #[test]
    fn a_nested_mapping_reports_full_paths() {
        const INNER: Schema = Schema::row("backoff", &[Key::new("jitterRatio", Kind::number(0.0, 1.0), "0.1", "")]);
        let config = json!({"jitterRatio": 2, "factor": 3});
        let mut nested = INNER.read_at("retryPolicy.backoff", &config).unwrap();
        nested.number("jitterRatio");
        let paths: Vec<String> = nested.problems().iter().map(|e| format!("{}: {}", e.path, e.message)).collect();
        assert_eq!(
            paths,
            [
                "retryPolicy.backoff.factor: unknown key \"factor\"",
                "retryPolicy.backoff.jitterRatio: must be a number from 0 to 1, got 2"
            ]
        );
        assert!(INNER.read_at("retryPolicy.backoff", &json!(3)).is_err());
    }

    #[test]
    fn a_schema_whose_default_breaks_its_kind_is_faulty() {
        assert_eq!(SCHEMA.faults(), Vec::<String>::new());
        const BAD: Schema =
            Schema::row("bad", &[Key::new("n", Kind::integer(1, 2), "0", ""), Key::new("n", Kind::Flag, "", "")]);
        assert_eq!(BAD.faults(), ["n: default 0 is not an integer from 1 to 2", "n: declared twice"]);
    }

    proptest::proptest! {
        #[test]
        fn integers_are_admitted_exactly_within_their_bounds(n in proptest::num::f64::ANY) {
            let admitted = Kind::integer(1, 1000).admits(&json!(n));
            proptest::prop_assert_eq!(admitted, n.fract() == 0.0 && (1.0..=1000.0).contains(&n));
        }
    }
}
