//! JSON read the way JavaScript's `JSON.parse` reads it, as cheap borrowed views, for rules that
//! must judge records exactly as the TypeScript reference does:
//!
//! - a missing key is `undefined`, distinct from `null`;
//! - numbers are the exact doubles of their text (`2147483647.0000002` is not `2147483647`);
//! - when a key appears twice, the last one wins;
//! - a lone surrogate escape (`"busy \ud83d"`, what `JSON.stringify` writes for text cut inside an
//!   emoji) is kept instead of failing the whole record. In a Rust `str` it stands as the
//!   private-use character `U+F0000 + (unit - 0xD800)`, so two strings compare equal exactly when
//!   their UTF-16 units do (a real character in `U+F0000..U+F07FF` would be taken for one; none
//!   occurs in retry records). [`JsValue::display`] prints it as `U+FFFD`, as Node does on a
//!   terminal; [`quote`] writes it back as its escape, as `JSON.stringify` does.
//!
//! Objects and arrays stay raw text until a field is asked for.

use std::borrow::Cow;
use std::fmt;

use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::js;

/// Where lone surrogates are kept: `U+F0000 + (unit - 0xD800)`.
const LONE_SURROGATE_BASE: u32 = 0xF0000;

#[derive(Debug, Clone, PartialEq)]
pub enum JsValue<'a> {
    Undefined,
    Null,
    Bool(bool),
    Number(f64),
    String(Cow<'a, str>),
    /// The object's JSON text.
    Object(Cow<'a, str>),
    /// The array's JSON text.
    Array(Cow<'a, str>),
}

impl<'a> JsValue<'a> {
    /// A whole JSON text; `None` when it is not JSON.
    pub fn parse(text: &'a str) -> Option<JsValue<'a>> {
        let raw: &'a RawValue = serde_json::from_str(text).ok()?;
        JsValue::from_raw(raw)
    }

    /// One raw JSON value (as serde_json captured it).
    pub fn from_raw(raw: &'a RawValue) -> Option<JsValue<'a>> {
        let text = raw.get();
        Some(match text.as_bytes().first()? {
            b'n' => JsValue::Null,
            b't' => JsValue::Bool(true),
            b'f' => JsValue::Bool(false),
            b'"' => JsValue::String(decode_string(text)?),
            b'{' => JsValue::Object(Cow::Borrowed(text)),
            b'[' => JsValue::Array(Cow::Borrowed(text)),
            _ => JsValue::Number(number(text)?),
        })
    }

    /// The value, owning its text.
    pub fn into_owned(self) -> JsValue<'static> {
        match self {
            JsValue::Undefined => JsValue::Undefined,
            JsValue::Null => JsValue::Null,
            JsValue::Bool(flag) => JsValue::Bool(flag),
            JsValue::Number(number) => JsValue::Number(number),
            JsValue::String(text) => JsValue::String(Cow::Owned(text.into_owned())),
            JsValue::Object(text) => JsValue::Object(Cow::Owned(text.into_owned())),
            JsValue::Array(text) => JsValue::Array(Cow::Owned(text.into_owned())),
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            JsValue::String(text) => Some(text),
            _ => None,
        }
    }

    pub fn as_f64(&self) -> Option<f64> {
        match self {
            JsValue::Number(number) => Some(*number),
            _ => None,
        }
    }

    pub fn is_undefined(&self) -> bool {
        matches!(self, JsValue::Undefined)
    }

    /// `typeof v === "object" && v !== null` (arrays included).
    pub fn is_object(&self) -> bool {
        matches!(self, JsValue::Object(_) | JsValue::Array(_))
    }

    /// A non-empty string (`typeof v === "string" && v.length > 0`).
    pub fn non_empty_str(&self) -> Option<&str> {
        self.as_str().filter(|text| !text.is_empty())
    }

    /// `Number.isSafeInteger(v)`.
    pub fn safe_integer(&self) -> Option<f64> {
        self.as_f64().filter(|number| js::is_safe_integer(*number))
    }

    /// The fields of an object (last duplicate wins); `None` for anything else, or an object
    /// whose keys cannot be read. An array has no fields but is an object.
    pub fn fields(&self) -> Option<Fields<'_>> {
        match self {
            JsValue::Object(text) => Fields::parse(text),
            JsValue::Array(_) => Some(Fields { entries: Vec::new() }),
            _ => None,
        }
    }

    /// `a === b`; objects and arrays are never equal (they would be distinct references).
    pub fn strict_equals(&self, other: &JsValue<'_>) -> bool {
        match (self, other) {
            (JsValue::Undefined, JsValue::Undefined) | (JsValue::Null, JsValue::Null) => true,
            (JsValue::Bool(a), JsValue::Bool(b)) => a == b,
            (JsValue::Number(a), JsValue::Number(b)) => a == b,
            (JsValue::String(a), JsValue::String(b)) => a == b,
            _ => false,
        }
    }

    /// `String(v)`, with a lone surrogate shown as `U+FFFD`.
    pub fn display(&self) -> String {
        match self {
            JsValue::Undefined => "undefined".to_owned(),
            JsValue::Null => "null".to_owned(),
            JsValue::Bool(flag) => flag.to_string(),
            JsValue::Number(number) => js::string(*number),
            JsValue::String(text) => printable(text),
            JsValue::Object(_) => "[object Object]".to_owned(),
            JsValue::Array(text) => array_display(text),
        }
    }
}

impl fmt::Display for JsValue<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.display())
    }
}

/// An object's fields, in order, borrowed from its text.
#[derive(Debug, Clone, Default)]
pub struct Fields<'a> {
    entries: Vec<(Cow<'a, str>, &'a RawValue)>,
}

impl<'a> Fields<'a> {
    /// The fields of an object's JSON text.
    pub fn parse(text: &'a str) -> Option<Fields<'a>> {
        let mut deserializer = serde_json::Deserializer::from_str(text);
        let entries = deserializer.deserialize_map(EntriesVisitor).ok()?;
        deserializer.end().ok()?;
        Some(Fields { entries })
    }

    /// The value of `key` (the last one when it appears twice); `undefined` when absent.
    pub fn get(&self, key: &str) -> JsValue<'a> {
        self.raw(key).and_then(JsValue::from_raw).unwrap_or(JsValue::Undefined)
    }

    /// The raw JSON of `key` (the last one when it appears twice).
    pub fn raw(&self, key: &str) -> Option<&'a RawValue> {
        self.entries.iter().rev().find(|(name, _)| name == key).map(|(_, raw)| *raw)
    }

    /// `key in object`.
    pub fn contains(&self, key: &str) -> bool {
        self.entries.iter().any(|(name, _)| name == key)
    }
}

struct EntriesVisitor;

impl<'de> Visitor<'de> for EntriesVisitor {
    type Value = Vec<(Cow<'de, str>, &'de RawValue)>;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut entries = Vec::with_capacity(map.size_hint().unwrap_or(12));
        while let Some(key) = map.next_key::<Key<'de>>()? {
            entries.push((key.0, map.next_value::<&'de RawValue>()?));
        }
        Ok(entries)
    }
}

/// A key, borrowed when it has no escapes.
struct Key<'a>(Cow<'a, str>);

impl<'de> serde::Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
                formatter.write_str("a string key")
            }
            fn visit_borrowed_str<E>(self, text: &'de str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Borrowed(text)))
            }
            fn visit_str<E>(self, text: &str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Owned(text.to_owned())))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

/// A JSON number's exact double; out-of-range numbers are infinite, as in JavaScript.
fn number(text: &str) -> Option<f64> {
    match serde_json::from_str::<f64>(text) {
        Ok(number) => Some(number),
        Err(_) if text.bytes().all(|byte| byte.is_ascii_digit() || b"+-.eE".contains(&byte)) => {
            Some(if text.starts_with('-') { f64::NEG_INFINITY } else { f64::INFINITY })
        }
        Err(_) => None,
    }
}

/// A JSON string literal (with its quotes) decoded; lone surrogates kept (see the module doc).
pub fn decode_string(literal: &str) -> Option<Cow<'_, str>> {
    let inner = literal.strip_prefix('"')?.strip_suffix('"')?;
    if !inner.contains('\\') {
        return Some(Cow::Borrowed(inner));
    }
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    let mut pending_high: Option<u32> = None;
    let flush = |out: &mut String, pending: &mut Option<u32>| {
        if let Some(high) = pending.take() {
            out.push(lone_surrogate(high));
        }
    };
    while let Some(c) = chars.next() {
        if c != '\\' {
            flush(&mut out, &mut pending_high);
            out.push(c);
            continue;
        }
        let escaped = chars.next()?;
        if escaped != 'u' {
            flush(&mut out, &mut pending_high);
            out.push(match escaped {
                '"' => '"',
                '\\' => '\\',
                '/' => '/',
                'b' => '\u{8}',
                'f' => '\u{c}',
                'n' => '\n',
                'r' => '\r',
                't' => '\t',
                _ => return None,
            });
            continue;
        }
        let hex: String = chars.by_ref().take(4).collect();
        let unit = u32::from_str_radix(&hex, 16).ok().filter(|_| hex.len() == 4)?;
        match unit {
            0xD800..=0xDBFF => {
                flush(&mut out, &mut pending_high);
                pending_high = Some(unit);
            }
            0xDC00..=0xDFFF => match pending_high.take() {
                Some(high) => out.push(char::from_u32(0x10000 + ((high - 0xD800) << 10) + (unit - 0xDC00))?),
                None => out.push(lone_surrogate(unit)),
            },
            _ => {
                flush(&mut out, &mut pending_high);
                out.push(char::from_u32(unit)?);
            }
        }
    }
    flush(&mut out, &mut pending_high);
    Some(Cow::Owned(out))
}

fn lone_surrogate(unit: u32) -> char {
    char::from_u32(LONE_SURROGATE_BASE + (unit - 0xD800)).expect("plane 15 is valid")
}

fn surrogate_of(c: char) -> Option<u32> {
    let code = c as u32;
    (LONE_SURROGATE_BASE..LONE_SURROGATE_BASE + 0x800).contains(&code).then(|| code - LONE_SURROGATE_BASE + 0xD800)
}

/// The text as a terminal shows it: lone surrogates as `U+FFFD`.
fn printable(text: &str) -> String {
    text.chars().map(|c| if surrogate_of(c).is_some() { '\u{FFFD}' } else { c }).collect()
}

/// `JSON.stringify(text)`, lone surrogates written as their escapes.
pub fn quote(text: &str) -> String {
    let quoted = js::to_string(text);
    if !quoted.chars().any(|c| surrogate_of(c).is_some()) {
        return quoted;
    }
    quoted.chars().fold(String::with_capacity(quoted.len()), |mut out, c| {
        match surrogate_of(c) {
            Some(unit) => out.push_str(&format!("\\u{unit:04x}")),
            None => out.push(c),
        }
        out
    })
}

/// `String(array)`: elements joined by commas, `null`/`undefined` as empty.
fn array_display(text: &str) -> String {
    let Ok(items) = serde_json::from_str::<Vec<&RawValue>>(text) else {
        return String::new();
    };
    items
        .into_iter()
        .map(|item| match JsValue::from_raw(item) {
            Some(JsValue::Null) | None => String::new(),
            Some(value) => value.display(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(text: &str) -> Fields<'_> {
        Fields::parse(text).unwrap()
    }

    #[test]
    fn missing_is_undefined_and_null_is_null() {
        let record = fields(r#"{"a":null}"#);
        assert_eq!(record.get("a"), JsValue::Null);
        assert_eq!(record.get("b"), JsValue::Undefined);
        assert_eq!(record.get("b").display(), "undefined");
        assert!(record.contains("a") && !record.contains("b"));
    }

    #[test]
    fn numbers_are_read_to_the_exact_double() {
        let record = fields(r#"{"d":2147483647.0000002,"r":0.9999999999999999,"m":4503599627370495.5,"x":1e400}"#);
        assert_eq!(record.get("d").as_f64(), Some(2147483647.0000002));
        assert_ne!(record.get("d").as_f64(), Some(2147483647.0));
        assert_eq!(record.get("r").as_f64(), Some(0.9999999999999999));
        assert_eq!(record.get("m").safe_integer(), None);
        assert_eq!(record.get("x").as_f64(), Some(f64::INFINITY));
    }

    #[test]
    fn the_last_duplicate_key_wins() {
        assert_eq!(fields(r#"{"a":1,"a":2}"#).get("a"), JsValue::Number(2.0));
    }

    #[test]
    fn a_lone_surrogate_is_kept_and_compared_as_utf16() {
        let record = fields(r#"{"m":"busy \ud83d","n":"busy \ud83d","p":"\ud83d\ude00","e":"a\"b\\c\/\n"}"#);
        let message = record.get("m");
        assert!(message.strict_equals(&record.get("n")));
        assert!(!message.strict_equals(&JsValue::String("busy ".into())));
        assert_eq!(message.display(), "busy \u{FFFD}");
        assert_eq!(quote(message.as_str().unwrap()), r#""busy \ud83d""#);
        assert_eq!(record.get("p").as_str(), Some("\u{1F600}"));
        assert_eq!(record.get("e").as_str(), Some("a\"b\\c/\n"));
    }

    #[test]
    fn values_display_as_javascript_string_does() {
        let record = fields(r#"{"o":{"a":1},"a":[1,null,"x",[2,3]],"n":2.0,"b":true}"#);
        let shown: Vec<String> = ["o", "a", "n", "b"].iter().map(|key| record.get(key).display()).collect();
        assert_eq!(shown, ["[object Object]", "1,,x,2,3", "2", "true"]);
        assert!(record.get("a").is_object() && record.get("a").fields().is_some());
        assert!(!record.get("o").strict_equals(&record.get("o")));
    }

    #[test]
    fn not_json_is_none() {
        assert_eq!(JsValue::parse("{"), None);
        assert_eq!(JsValue::parse(" 5 ").and_then(|value| value.as_f64()), Some(5.0));
    }
}
