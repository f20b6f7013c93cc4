//! One declaration per config key: a row's [`Schema`] lists each key once (name, kind, default,
//! meaning), and that list yields the manifest's docs, the unknown-key check (with a did-you-mean
//! for near misses) and the checks of every value, all reported in one pass and in one style:
//! `<key path>` + `must be <what>, got <value>`. Lists and mappings are declared the same way —
//! [`Kind::list_of`] (optionally [`Kind::distinct`], [`Kind::non_empty`]), [`Kind::map_of`], and
//! [`Kind::Nested`] for a mapping with keys of its own — so each item and entry is checked, and
//! named where it is wrong: `codes[2]: must be a non-empty string, got 5`, `codes[3]: "SERVER" is
//! listed twice (first at codes[0])`, `env.A B: is not a variable name …`, `breaker.windowMs: …`.
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
    /// Any string, the empty one too.
    String,
    /// One of these strings.
    Choice(&'static [&'static str]),
    /// A string the row's own rule admits, described as `what` (a header name, a tool name).
    Matching { what: &'static str, admits: Rule },
    /// A list whose items are each of the kind `items`; `distinct`: no item twice; `non_empty`:
    /// at least one item.
    List { items: &'static Kind, distinct: bool, non_empty: bool },
    /// A mapping whose names are each of the kind `names` and whose values of the kind `values`.
    Mapping { names: &'static Kind, values: &'static Kind },
    /// A mapping with keys of its own, declared by their schema.
    Nested(&'static Schema),
    /// Any value; the row checks it.
    Any,
    /// A key that belongs elsewhere: refused, with this reason, whatever it holds.
    Misplaced(&'static str),
    /// Where shared counters are kept: `memory` (this process), `machine` (every dsh process of
    /// the machine) or `redis://HOST:PORT` (a fleet). Only under [`COUNTER_STORE_KEY`].
    CounterStore,
}

/// The rule of a [`Kind::Matching`] string; two rules are equal when they are the same function.
#[derive(Clone, Copy)]
pub struct Rule(fn(&str) -> bool);

impl PartialEq for Rule {
    fn eq(&self, other: &Rule) -> bool {
        std::ptr::fn_addr_eq(self.0, other.0)
    }
}

impl std::fmt::Debug for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Rule(..)")
    }
}

impl Kind {
    /// A list whose items the row checks itself.
    pub const LIST: Kind = Kind::list_of(&Kind::Any);
    /// A mapping whose values the row checks itself.
    pub const MAPPING: Kind = Kind::map_of(&Kind::String, &Kind::Any);

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

    /// A string `admits` accepts, described (in messages and docs) as `what`.
    pub const fn matching(what: &'static str, admits: fn(&str) -> bool) -> Kind {
        Kind::Matching { what, admits: Rule(admits) }
    }

    /// A list whose items are each of the kind `items`.
    pub const fn list_of(items: &'static Kind) -> Kind {
        Kind::List { items, distinct: false, non_empty: false }
    }

    /// The same list, with no item twice.
    pub const fn distinct(self) -> Kind {
        match self {
            Kind::List { items, non_empty, .. } => Kind::List { items, distinct: true, non_empty },
            _ => panic!("only a list is distinct"),
        }
    }

    /// The same list, with at least one item.
    pub const fn non_empty(self) -> Kind {
        match self {
            Kind::List { items, distinct, .. } => Kind::List { items, distinct, non_empty: true },
            _ => panic!("only a list is non-empty"),
        }
    }

    /// A mapping whose names are of the kind `names` and whose values of the kind `values`.
    pub const fn map_of(names: &'static Kind, values: &'static Kind) -> Kind {
        Kind::Mapping { names, values }
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
            Kind::String => "a string".to_owned(),
            Kind::Choice(options) => choice_words(options),
            Kind::Matching { what, .. } => (*what).to_owned(),
            Kind::List { items, distinct, non_empty } => list_words(items, *distinct, *non_empty),
            Kind::Mapping { names, values } => mapping_words(names, values),
            Kind::Nested(schema) => format!("a mapping of {}", and_words(&schema.names())),
            Kind::Any => "any value".to_owned(),
            Kind::Misplaced(reason) => (*reason).to_owned(),
            Kind::CounterStore => "\"memory\", \"machine\" or a redis://HOST:PORT URL".to_owned(),
        }
    }

    /// What a value of the wrong shape must be: a list or a mapping says only that (its items or
    /// entries are named where they are wrong), anything else says all.
    fn shape(&self) -> String {
        match self {
            Kind::List { .. } => "a list".to_owned(),
            Kind::Mapping { .. } | Kind::Nested(_) => "a mapping".to_owned(),
            other => other.describe(),
        }
    }

    /// Whether `value` is of this kind, items, entries and nested keys included.
    pub fn admits(&self, value: &Value) -> bool {
        match self {
            Kind::Flag => value.is_boolean(),
            Kind::Integer { min, max } => js::as_safe_u64(value).is_some_and(|n| (*min..=*max).contains(&n)),
            Kind::Number { min, min_exclusive, max } => value.as_f64().is_some_and(|n| {
                let above_min = if *min_exclusive { n > *min } else { n >= *min };
                n.is_finite() && above_min && n <= *max
            }),
            Kind::Text => value.as_str().is_some_and(|text| !text.trim().is_empty()),
            Kind::String => value.is_string(),
            Kind::Choice(options) => value.as_str().is_some_and(|text| options.contains(&text)),
            Kind::Matching { admits, .. } => value.as_str().is_some_and(admits.0),
            Kind::List { items, distinct, non_empty } => value.as_array().is_some_and(|list| {
                let repeats = || list.iter().enumerate().any(|(index, item)| list[..index].contains(item));
                !(*non_empty && list.is_empty())
                    && list.iter().all(|item| items.admits(item))
                    && !(*distinct && repeats())
            }),
            Kind::Mapping { names, values } => value.as_object().is_some_and(|entries| {
                entries.iter().all(|(name, entry)| names.admits(&Value::from(name.as_str())) && values.admits(entry))
            }),
            Kind::Nested(schema) => schema.admits(value),
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

/// `a`, `a and b`, `a, b and c`.
fn and_words(words: &[&str]) -> String {
    match words {
        [] => "no keys".to_owned(),
        [one] => (*one).to_owned(),
        [head @ .., last] => format!("{} and {last}", head.join(", ")),
    }
}

fn list_words(items: &Kind, distinct: bool, non_empty: bool) -> String {
    let mut words = if non_empty { "a non-empty list" } else { "a list" }.to_owned();
    if distinct {
        words.push_str(" without repeats");
    }
    if *items != Kind::Any {
        words.push_str(&format!(", each item {}", items.describe()));
    }
    words
}

fn mapping_words(names: &Kind, values: &Kind) -> String {
    let mut parts = Vec::new();
    if !matches!(names, Kind::String | Kind::Any) {
        parts.push(format!("each name {}", names.describe()));
    }
    if *values != Kind::Any {
        parts.push(format!("each value {}", values.describe()));
    }
    match parts.as_slice() {
        [] => "a mapping".to_owned(),
        parts => format!("a mapping, {}", parts.join(" and ")),
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
    /// one; otherwise `must be <kind>, got <value>`. A key with one is refused as a whole: its
    /// value's first problem only (its kind, then emptiness, then an item, then a repeat) is
    /// reported, at the key, with this message or the finer ones below. (The keys of a nested
    /// mapping answer for themselves.)
    pub refusal: Option<&'static str>,
    /// The exact message for an item of a list, or a value of a mapping, of the wrong kind.
    pub item_refusal: Option<&'static str>,
    /// The exact message for an item a distinct list repeats; `{item}` stands for the item and
    /// `{first}` for the path of its first place.
    pub repeat_refusal: Option<&'static str>,
}

/// What a repeated item of a distinct list is told, unless its key says otherwise.
const REPEATED: &str = "{item} is listed twice (first at {first})";

impl Key {
    pub const fn new(name: &'static str, kind: Kind, default: &'static str, doc: &'static str) -> Key {
        Key { name, kind, default, doc, refusal: None, item_refusal: None, repeat_refusal: None }
    }

    /// The same key, refusing a value of the wrong kind with exactly `message`.
    pub const fn refused_as(mut self, message: &'static str) -> Key {
        self.refusal = Some(message);
        self
    }

    /// The same key, refusing an item (or mapping value) of the wrong kind with exactly `message`.
    pub const fn items_refused_as(mut self, message: &'static str) -> Key {
        self.item_refusal = Some(message);
        self
    }

    /// The same key, refusing a repeated item with exactly `message` (see [`Key::repeat_refusal`]).
    pub const fn repeats_refused_as(mut self, message: &'static str) -> Key {
        self.repeat_refusal = Some(message);
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
    /// The exact message for an unknown key, where one is pinned; otherwise `unknown key
    /// "<name>"`, with a did-you-mean for a near miss.
    pub unknown_refusal: Option<&'static str>,
}

impl Schema {
    /// A plugin's schema: its messages start with `<name>: `.
    pub const fn plugin(name: &'static str, keys: &'static [Key]) -> Schema {
        Schema { name, keys, prefixed: true, unknown_refusal: None }
    }

    /// A built-in row's schema (agent, provider routes): its messages are bare.
    pub const fn row(name: &'static str, keys: &'static [Key]) -> Schema {
        Schema { name, keys, prefixed: false, unknown_refusal: None }
    }

    /// The same schema, refusing an unknown key with exactly `message`.
    pub const fn unknown_keys_refused_as(mut self, message: &'static str) -> Schema {
        self.unknown_refusal = Some(message);
        self
    }

    /// The keys as the manifest lists them (misplaced keys are not the row's, so not listed); a
    /// nested mapping's keys follow it, as `<key>.<name>`.
    pub fn manifest_keys(&self) -> RVec<ConfigKey> {
        let mut listed = RVec::new();
        self.list_keys("", &mut listed);
        listed
    }

    fn list_keys(&self, prefix: &str, listed: &mut RVec<ConfigKey>) {
        for key in self.keys.iter().filter(|key| !matches!(key.kind, Kind::Misplaced(_))) {
            let name = format!("{prefix}{}", key.name);
            listed.push(ConfigKey { name: name.as_str().into(), summary: key.summary().into() });
            if let Kind::Nested(nested) = key.kind {
                nested.list_keys(&format!("{name}."), listed);
            }
        }
    }

    /// The names of the keys the row takes (misplaced ones are not its own).
    fn names(&self) -> Vec<&'static str> {
        self.keys.iter().filter(|key| !matches!(key.kind, Kind::Misplaced(_))).map(|key| key.name).collect()
    }

    /// The key named `name`; a name the schema does not declare is a bug in the row's code.
    pub fn key(&self, name: &str) -> &'static Key {
        let keys: &'static [Key] = self.keys;
        keys.iter().find(|key| key.name == name).unwrap_or_else(|| panic!("{}: no key {name:?} declared", self.name))
    }

    /// Whether `value` is a mapping of this schema's keys, each of its kind.
    pub fn admits(&self, value: &Value) -> bool {
        let declared = |name: &str| self.keys.iter().find(|key| key.name == name);
        value.as_object().is_some_and(|object| {
            object.iter().all(|(name, value)| declared(name).is_some_and(|key| key.kind.admits(value)))
        })
    }

    /// What is wrong with the declaration itself: a default that is not JSON or not of its key's
    /// kind, a key declared twice, and the faults of nested schemas. Every row's unit tests
    /// assert there is nothing.
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
            if let Kind::Nested(nested) = key.kind {
                faults.extend(nested.faults().into_iter().map(|fault| format!("{}.{fault}", key.name)));
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
        let mut row = self.open(path.to_owned(), object);
        row.check_names();
        Ok(row)
    }

    fn open<'a>(&'static self, base: String, object: Cow<'a, Map<String, Value>>) -> Row<'a> {
        Row { schema: self, base, object, errors: Vec::new() }
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

/// The row's own check of one item of a list, after the schema's ([`Row::list_where`]).
type ItemRule<'r, 'a> = &'r mut dyn FnMut(&mut Row<'a>, &str, &Value) -> bool;

/// One thing wrong inside a key's value.
enum Fault {
    /// `got` is not of `kind` (for a list or mapping: not one at all).
    Kind { kind: &'static Kind, got: Value },
    /// A list that must hold an item holds none.
    Empty,
    /// A mapping's name is not of the kind `kind`.
    Name { kind: &'static Kind },
    /// `got` repeats the item at the path `first`.
    Repeat { got: Value, first: String },
}

impl Fault {
    /// Which fault a key refused as a whole reports: the lowest.
    fn rank(&self, depth: usize) -> u8 {
        match self {
            Fault::Kind { .. } if depth == 0 => 0,
            Fault::Empty => 1,
            Fault::Kind { .. } | Fault::Name { .. } => 2,
            Fault::Repeat { .. } => 3,
        }
    }

    /// The fault in the key's exact words where it has them, else in the schema's. `depth` is
    /// 0 for the key's value, 1 for its items or entries.
    fn message(&self, key: &Key, depth: usize) -> String {
        let exact = match self {
            Fault::Kind { .. } if depth == 0 => key.refusal,
            Fault::Kind { .. } if depth == 1 => key.item_refusal.or(key.refusal),
            Fault::Repeat { .. } if depth == 1 => key.repeat_refusal.or(key.refusal),
            Fault::Empty => None,
            _ => key.refusal,
        };
        match (self, exact) {
            (Fault::Repeat { got, first }, exact) => {
                exact.unwrap_or(REPEATED).replace("{item}", &got.to_string()).replace("{first}", first)
            }
            (_, Some(exact)) => exact.to_owned(),
            (Fault::Kind { kind, got }, None) => format!("must be {}, got {got}", kind.shape()),
            (Fault::Empty, None) => "must not be empty".to_owned(),
            (Fault::Name { kind }, None) => format!("is not {}", kind.describe()),
        }
    }
}

/// One key's value being checked.
struct Reading {
    key: &'static Key,
    /// For a key refused as a whole: its lowest-ranked fault so far, in words.
    worst: Option<(u8, String)>,
}

impl<'a> Row<'a> {
    fn check_names(&mut self) {
        let schema = self.schema;
        let mut found = Vec::new();
        for name in self.object.keys() {
            let message = match schema.keys.iter().find(|key| key.name == name) {
                Some(Key { kind: Kind::Misplaced(reason), .. }) => (*reason).to_owned(),
                Some(_) => continue,
                None => match (schema.unknown_refusal, schema.closest(name)) {
                    (Some(exact), _) => exact.to_owned(),
                    (None, Some(near)) => format!("unknown key \"{name}\" (did you mean \"{near}\"?)"),
                    (None, None) => format!("unknown key \"{name}\""),
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

    /// The value of `key`, or its default, once checked against its kind — a list's items, a
    /// mapping's entries and a nested mapping's keys too, each problem noted where it is, the
    /// wrong items and entries left out. `None` when it is unset without a default, or wrong.
    pub fn value(&mut self, key: &str) -> Option<Value> {
        self.read_value(key, &mut |_, _, _| true)
    }

    fn read_value(&mut self, key: &str, rule: ItemRule<'_, 'a>) -> Option<Value> {
        let declared = self.schema.key(key);
        match self.object.get(key).cloned() {
            None => declared.default_value(),
            Some(given) => self.checked(declared, given, rule),
        }
    }

    fn checked(&mut self, declared: &'static Key, given: Value, rule: ItemRule<'_, 'a>) -> Option<Value> {
        let mut reading = Reading { key: declared, worst: None };
        let value = self.walk(&mut reading, &declared.kind, declared.name, 0, given, rule);
        match reading.worst {
            Some((_, message)) => {
                self.refuse(declared.name, message);
                None
            }
            None => value,
        }
    }

    /// Notes `fault` at `path` (`depth` below the key's value), or keeps it for a key refused as
    /// a whole.
    fn fault(&mut self, reading: &mut Reading, path: &str, depth: usize, fault: Fault) {
        let message = fault.message(reading.key, depth);
        if reading.key.refusal.is_none() {
            return self.refuse(path, message);
        }
        let rank = fault.rank(depth);
        if reading.worst.as_ref().is_none_or(|(worst, _)| rank < *worst) {
            reading.worst = Some((rank, message));
        }
    }

    /// `value` checked against `kind` at `path` (a list's items by `rule` too); `None` when it is
    /// wrong.
    fn walk(
        &mut self,
        reading: &mut Reading,
        kind: &'static Kind,
        path: &str,
        depth: usize,
        value: Value,
        rule: ItemRule<'_, 'a>,
    ) -> Option<Value> {
        match kind {
            Kind::List { .. } => self.walk_list(reading, kind, path, depth, value, rule).map(Value::Array),
            Kind::Mapping { names, values } => self.walk_mapping(reading, (kind, names, values), path, depth, value),
            Kind::Nested(schema) => match value {
                Value::Object(object) => Some(self.walk_nested(schema, path, object)),
                got => {
                    self.fault(reading, path, depth, Fault::Kind { kind, got });
                    None
                }
            },
            _ if kind.admits(&value) => Some(value),
            _ => {
                self.fault(reading, path, depth, Fault::Kind { kind, got: value });
                None
            }
        }
    }

    /// A list's items, each checked against its kind, then by `rule`, then against those kept
    /// before it (when the list is distinct).
    fn walk_list(
        &mut self,
        reading: &mut Reading,
        kind: &'static Kind,
        path: &str,
        depth: usize,
        value: Value,
        rule: ItemRule<'_, 'a>,
    ) -> Option<Vec<Value>> {
        let Kind::List { items, distinct, non_empty } = kind else { unreachable!("walk_list reads lists") };
        let given = match value {
            Value::Array(given) if *non_empty && given.is_empty() => {
                self.fault(reading, path, depth, Fault::Empty);
                return None;
            }
            Value::Array(given) => given,
            got => {
                self.fault(reading, path, depth, Fault::Kind { kind, got });
                return None;
            }
        };
        let mut kept: Vec<(String, Value)> = Vec::with_capacity(given.len());
        for (index, item) in given.into_iter().enumerate() {
            let at = format!("{path}[{index}]");
            let Some(item) = self.walk(reading, items, &at, depth + 1, item, &mut |_, _, _| true) else { continue };
            if !rule(self, &at, &item) {
                continue;
            }
            match kept.iter().position(|(_, seen)| *distinct && *seen == item) {
                Some(first) => {
                    let first = self.path(&kept[first].0);
                    self.fault(reading, &at, depth + 1, Fault::Repeat { got: item, first });
                }
                None => kept.push((at, item)),
            }
        }
        Some(kept.into_iter().map(|(_, item)| item).collect())
    }

    /// A mapping's entries, each name and then each value checked against its kind.
    fn walk_mapping(
        &mut self,
        reading: &mut Reading,
        (kind, names, values): (&'static Kind, &'static Kind, &'static Kind),
        path: &str,
        depth: usize,
        value: Value,
    ) -> Option<Value> {
        let Value::Object(given) = value else {
            self.fault(reading, path, depth, Fault::Kind { kind, got: value });
            return None;
        };
        let mut kept = Map::new();
        for (name, entry) in given {
            let at = format!("{path}.{name}");
            if !names.admits(&Value::from(name.as_str())) {
                self.fault(reading, &at, depth + 1, Fault::Name { kind: names });
            } else if let Some(entry) = self.walk(reading, values, &at, depth + 1, entry, &mut |_, _, _| true) {
                kept.insert(name, entry);
            }
        }
        Some(Value::Object(kept))
    }

    /// A nested mapping at `path`, each of its keys checked in the order declared, then its
    /// unknown keys named; its keys answer for themselves, in its schema's words.
    fn walk_nested(&mut self, schema: &'static Schema, path: &str, object: Map<String, Value>) -> Value {
        let mut nested = schema.open(self.path(path), Cow::Owned(object));
        let mut kept = Map::new();
        for key in schema.keys.iter().filter(|key| !matches!(key.kind, Kind::Misplaced(_))) {
            if let Some(value) = nested.given(key.name).is_some().then(|| nested.value(key.name)).flatten() {
                kept.insert(key.name.to_owned(), value);
            }
        }
        nested.check_names();
        self.errors.append(&mut nested.errors);
        Value::Object(kept)
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

    /// A string key ([`Kind::Text`], [`Kind::String`], [`Kind::Choice`], [`Kind::Matching`]), or
    /// `None` when it is unset without a default.
    pub fn text(&mut self, key: &str) -> Option<String> {
        self.value(key).and_then(|value| value.as_str().map(str::to_owned))
    }

    /// A [`Kind::List`] key's items that are right (none when it is unset without a default, or
    /// not a list).
    pub fn list(&mut self, key: &str) -> Vec<Value> {
        self.list_where(key, |_, _, _| true)
    }

    /// [`Row::list`], each item that the schema admits then put to the row's own `rule` (given
    /// the row, the item's path and the item), in the same pass: an item `rule` refuses (noting
    /// why) is left out, and is no first place for a repeat.
    pub fn list_where(&mut self, key: &str, mut rule: impl FnMut(&mut Row<'a>, &str, &Value) -> bool) -> Vec<Value> {
        match self.read_value(key, &mut rule) {
            Some(Value::Array(items)) => items,
            _ => Vec::new(),
        }
    }

    /// The items of a list of strings.
    pub fn strings(&mut self, key: &str) -> Vec<String> {
        self.list(key).into_iter().filter_map(|item| item.as_str().map(str::to_owned)).collect()
    }

    /// A [`Kind::Mapping`] key's entries that are right, in the order given.
    pub fn entries(&mut self, key: &str) -> Vec<(String, Value)> {
        match self.value(key) {
            Some(Value::Object(entries)) => entries.into_iter().collect(),
            _ => Vec::new(),
        }
    }

    /// The entries of a mapping of strings.
    pub fn string_entries(&mut self, key: &str) -> Vec<(String, String)> {
        let entries = self.entries(key).into_iter();
        entries.filter_map(|(name, value)| Some((name, value.as_str()?.to_owned()))).collect()
    }

    /// Reads a [`Kind::Nested`] key's mapping (given, else its default, else empty) with `read`,
    /// which reads its keys as a row's; then its unknown keys are named, and every problem
    /// joins this row's.
    pub fn nested<T>(&mut self, key: &str, read: impl FnOnce(&mut Row<'_>) -> T) -> T {
        let declared = self.schema.key(key);
        let Kind::Nested(schema) = declared.kind else {
            panic!("{}: key {key:?} is not a nested mapping", self.schema.name)
        };
        let object = match self.object.get(key).cloned().or_else(|| declared.default_value()) {
            Some(Value::Object(object)) => object,
            Some(got) => {
                self.checked(declared, got, &mut |_, _, _| true);
                Map::new()
            }
            None => Map::new(),
        };
        let mut nested = schema.open(self.path(key), Cow::Owned(object));
        let read = read(&mut nested);
        nested.check_names();
        self.errors.append(&mut nested.errors);
        read
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

    const SMALL: Kind = Kind::integer(0, 9);
    const NAME: Kind = Kind::matching("a short name", |name| name.len() <= 3);
    const BACKOFF: Schema = Schema::plugin(
        "budget",
        &[
            Key::new("jitterRatio", Kind::number(0.0, 1.0), "0.1", "random spread"),
            Key::new("waits", Kind::list_of(&SMALL), "[]", "waits in s"),
        ],
    )
    .unknown_keys_refused_as("unknown key (backoff takes jitterRatio and waits)");
    const NESTING: &[Key] = &[
        Key::new("routes", Kind::list_of(&Kind::Text).distinct(), "[]", "routes in order"),
        Key::new("codes", Kind::list_of(&Kind::Text).distinct().non_empty(), r#"["SERVER"]"#, "codes")
            .refused_as("must be a list of codes")
            .items_refused_as("must contain only non-empty strings")
            .repeats_refused_as("must not contain duplicates"),
        Key::new("env", Kind::map_of(&NAME, &Kind::String), "{}", "variables").items_refused_as("must be a string"),
        Key::new("backoff", Kind::Nested(&BACKOFF), "{}", "how long to wait"),
        Key::new("rules", Kind::list_of(&Kind::Text).distinct(), "[]", "rules")
            .repeats_refused_as("duplicate rule {item}"),
    ];
    const NESTED: Schema = Schema::plugin("budget", NESTING);

    fn nested_problems(config: Value) -> Vec<String> {
        let mut row = NESTED.read(&config).unwrap();
        row.list("routes");
        row.list("codes");
        row.entries("env");
        row.nested("backoff", |backoff| {
            backoff.number("jitterRatio");
            backoff.list("waits");
        });
        row.list_where("rules", |row, path, rule| {
            let bare = rule == "*";
            if bare {
                row.refuse(path, "a bare \"*\" matches everything");
            }
            !bare
        });
        row.finish(()).unwrap_err().iter().map(|e| format!("{}: {}", e.path, e.message)).collect()
    }

    #[test]
    fn each_item_and_entry_is_checked_where_it_is_and_a_repeat_names_its_first_place() {
        assert_eq!(
            nested_problems(json!({
                "routes": ["a", "", "a", 5],
                "env": {"A": "x", "TOO_LONG": "y", "N": 1},
                "backoff": {"jitterRatio": 2, "factor": 2, "waits": [1, 10]},
                "rules": ["x", "*", "x"],
            })),
            [
                "routes[1]: budget: must be a non-empty string, got \"\"",
                "routes[2]: budget: \"a\" is listed twice (first at routes[0])",
                "routes[3]: budget: must be a non-empty string, got 5",
                "env.TOO_LONG: budget: is not a short name",
                "env.N: budget: must be a string",
                "backoff.jitterRatio: budget: must be a number from 0 to 1, got 2",
                "backoff.waits[1]: budget: must be an integer from 0 to 9, got 10",
                "backoff.factor: budget: unknown key (backoff takes jitterRatio and waits)",
                "rules[1]: budget: a bare \"*\" matches everything",
                "rules[2]: budget: duplicate rule \"x\"",
            ]
        );
    }

    #[test]
    fn a_list_or_mapping_of_the_wrong_shape_says_only_that() {
        assert_eq!(
            nested_problems(json!({"routes": "a", "env": [], "backoff": 1})),
            [
                "routes: budget: must be a list, got \"a\"",
                "env: budget: must be a mapping, got []",
                "backoff: budget: must be a mapping, got 1"
            ]
        );
    }

    #[test]
    fn a_key_refused_as_a_whole_reports_its_first_problem_at_the_key_in_its_words() {
        let cases = [
            (json!("SERVER"), "must be a list of codes"),
            (json!([]), "must not be empty"),
            (json!(["A", "A", ""]), "must contain only non-empty strings"),
            (json!(["A", 1]), "must contain only non-empty strings"),
            (json!(["A", "A"]), "must not contain duplicates"),
        ];
        for (codes, message) in cases {
            assert_eq!(nested_problems(json!({"codes": codes})), [format!("codes: budget: {message}")], "{codes}");
        }
    }

    #[test]
    fn wrong_items_and_entries_are_left_out_of_what_is_read() {
        let config = json!({"routes": ["a", 1, "a", "b"], "env": {"A": "1", "LONG": "2", "B": 3}});
        let mut row = NESTED.read(&config).unwrap();
        assert_eq!(row.strings("routes"), ["a", "b"]);
        assert_eq!(row.string_entries("env"), [("A".to_owned(), "1".to_owned())]);
        assert_eq!(row.strings("codes"), ["SERVER"], "the default");
        assert_eq!(row.nested("backoff", |backoff| backoff.number("jitterRatio")), 0.1);
        assert_eq!(row.value("backoff"), Some(json!({})));
        assert_eq!(row.problems().len(), 4);
    }

    #[test]
    fn the_manifest_describes_items_entries_and_nested_keys() {
        let keys = NESTED.manifest_keys();
        let shown: Vec<String> = keys.iter().map(|key| format!("{}: {}", key.name, key.summary)).collect();
        assert_eq!(
            shown,
            [
                "routes: routes in order (a list without repeats, each item a non-empty string; default [])",
                "codes: codes (a non-empty list without repeats, each item a non-empty string; default [\"SERVER\"])",
                "env: variables (a mapping, each name a short name and each value a string; default {})",
                "backoff: how long to wait (a mapping of jitterRatio and waits; default {})",
                "backoff.jitterRatio: random spread (a number from 0 to 1; default 0.1)",
                "backoff.waits: waits in s (a list, each item an integer from 0 to 9; default [])",
                "rules: rules (a list without repeats, each item a non-empty string; default [])",
            ]
        );
    }

    #[test]
    fn a_default_that_breaks_its_items_or_a_nested_key_is_a_fault() {
        assert_eq!(NESTED.faults(), Vec::<String>::new());
        const BAD_BACKOFF: Schema = Schema::row("b", &[Key::new("waits", Kind::list_of(&SMALL), "[10]", "")]);
        const BAD: Schema = Schema::row(
            "bad",
            &[
                Key::new("codes", Kind::list_of(&Kind::Text).distinct(), r#"["A", "A"]"#, ""),
                Key::new("backoff", Kind::Nested(&BAD_BACKOFF), r#"{"factor": 2}"#, ""),
            ],
        );
        assert_eq!(
            BAD.faults(),
            [
                "codes: default [\"A\", \"A\"] is not a list without repeats, each item a non-empty string",
                "backoff: default {\"factor\": 2} is not a mapping of waits",
                "backoff.waits: default [10] is not a list, each item an integer from 0 to 9",
            ]
        );
    }

    /// A list's items: small integers, out-of-range ones, strings, repeats.
    fn items() -> impl proptest::strategy::Strategy<Value = Vec<Value>> {
        use proptest::prelude::*;
        let item = prop_oneof![(0u64..12).prop_map(Value::from), Just(json!("x")), Just(json!(-1)), Just(json!(1.5))];
        proptest::collection::vec(item, 0..12)
    }

    proptest::proptest! {
        #[test]
        fn integers_are_admitted_exactly_within_their_bounds(n in proptest::num::f64::ANY) {
            let admitted = Kind::integer(1, 1000).admits(&json!(n));
            proptest::prop_assert_eq!(admitted, n.fract() == 0.0 && (1.0..=1000.0).contains(&n));
        }

        #[test]
        fn a_list_keeps_exactly_its_first_admitted_items_and_names_every_other(items in items()) {
            const LIST: Schema = Schema::row("l", &[Key::new("items", Kind::list_of(&SMALL).distinct(), "", "")]);
            let config = json!({"items": items.clone()});
            let mut row = LIST.read(&config).unwrap();
            let kept = row.list("items");
            let mut expected: Vec<Value> = Vec::new();
            for item in &items {
                if SMALL.admits(item) && !expected.contains(item) {
                    expected.push(item.clone());
                }
            }
            proptest::prop_assert_eq!(row.problems().len(), items.len() - expected.len());
            proptest::prop_assert_eq!(LIST.keys[0].kind.admits(&json!(items)), row.problems().is_empty());
            proptest::prop_assert_eq!(kept, expected);
        }
    }
}
