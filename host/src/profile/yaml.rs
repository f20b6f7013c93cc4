//! Every YAML document dsh reads or writes goes through this module, so the YAML library can be
//! swapped by changing this file alone.
//!
//! Documents are read the way DeepSeek Harness reads its `cordis.patch.yml` files — js-yaml 4
//! with its JSON schema — from yaml-rust2's event stream, into `serde_json::Value`s (key order
//! kept):
//!
//! - a plain scalar is `null` (`~`, `null`, `Null`, `NULL`, nothing), a boolean (`true`, `True`,
//!   `TRUE`, `false`, …), an integer (`017`, `0x1F`, `0o17`, `0b101`; no `_`), a float (`1e3`,
//!   `.5`, `0.`; not `+.5`, not one that overflows) or else a string (`yes`, `on`, `12:30` and
//!   dates stay strings); a quoted or block scalar is a string;
//! - the core tags `!!str`, `!!int`, `!!float`, `!!bool`, `!!null`, `!!map`, `!!seq` convert
//!   (a value the tag cannot take is refused); other tags are refused, `!!js` with a message
//!   saying what to use instead;
//! - mapping keys become strings as JavaScript object keys do (`1.0` is `"1"`, `[1, 2]` is
//!   `"1,2"`, a mapping `"[object Object]"`), and two keys that become the same string are a
//!   duplicated mapping key, refused with its line;
//! - an integral number is an integer (`1.0` is `1`), as JavaScript has only one kind of number;
//! - a leading byte-order mark is skipped.
//!
//! Where dsh deliberately differs: `.inf` and `.nan` are refused (JSON has no such numbers; the
//! line is named), integers beyond 2^53 are kept exact, and an alias is a copy of its anchor's
//! value (js-yaml shares one object).
//!
//! Writing ([`to_string`]) emits block YAML whose plain scalars read back as the same values;
//! anything else is double-quoted.

use std::collections::HashMap;

use serde::de::DeserializeOwned;
use serde_json::{Map, Number, Value};
use yaml_rust2::parser::{Event, Parser, Tag};
use yaml_rust2::scanner::{Marker, TScalarStyle};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum YamlError {
    /// Not valid YAML; the message carries the line and column.
    #[error("{0}")]
    Syntax(String),
    #[error(
        "line {line}, column {column}: `!!js` tags (JavaScript expressions of the TypeScript harness) are not \
         supported by dsh; write the value itself, and for a secret name its environment variable with \
         `apiKeyEnv: NAME`"
    )]
    JsTag { line: usize, column: usize },
    #[error("line {line}, column {column}: unsupported YAML tag `{tag}`")]
    UnsupportedTag { line: usize, column: usize, tag: String },
    #[error("line {line}, column {column}: {message}")]
    Value { line: usize, column: usize, message: String },
    /// The document holds, or expands through aliases to, more values than [`MAX_VALUES`]. (The
    /// parser itself refuses nesting deeper than it can read.)
    #[error("line {line}, column {column}: {what}; nothing of it was used")]
    TooLarge { line: usize, column: usize, what: String },
    /// Valid JSON data of the wrong shape for the type asked for.
    #[error("{0}")]
    Shape(String),
}

/// The most values (scalars, sequences and mappings, each alias counted as the values it copies)
/// a document may hold: an alias bomb of a few hundred bytes is refused before it expands.
pub const MAX_VALUES: usize = 1_000_000;

/// The most scalar text a document may hold, each alias counted as the text it copies.
pub const MAX_TEXT_BYTES: usize = 32 * 1024 * 1024;

/// How much a document (or one anchored value) holds: values and scalar text.
#[derive(Debug, Clone, Copy, Default)]
struct Size {
    values: usize,
    text: usize,
}

impl Size {
    fn plus(self, other: Size) -> Size {
        Size { values: self.values.saturating_add(other.values), text: self.text.saturating_add(other.text) }
    }

    fn minus(self, earlier: Size) -> Size {
        Size { values: self.values - earlier.values, text: self.text - earlier.text }
    }

    /// What is past a limit, for the error.
    fn excess(self) -> Option<String> {
        if self.values > MAX_VALUES {
            Some(format!("the document holds or expands through aliases to more than {MAX_VALUES} values"))
        } else if self.text > MAX_TEXT_BYTES {
            Some(format!(
                "the document holds or expands through aliases to more than {} MiB of text",
                MAX_TEXT_BYTES >> 20
            ))
        } else {
            None
        }
    }
}

/// Parses one document. `Ok(None)` for a document with no content (empty or comments only).
pub fn parse(text: &str) -> Result<Option<Value>, YamlError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let read = |text: &str| {
        Reader { parser: Parser::new_from_str(text), text, anchors: HashMap::new(), size: Size::default() }.document()
    };
    let mut text = std::borrow::Cow::Borrowed(text);
    // js-yaml reads a quoted scalar whose continuation lines are not indented past their parent;
    // yaml-rust2 refuses it (naming the line where the scalar starts). Indenting the lines after
    // it further does not change the scalar (a quoted scalar's line breaks fold and its leading
    // spaces are dropped), so read it that way, one more line at a time.
    let mut continuation = (0, 0);
    for _ in 0..MAX_REINDENTED_LINES {
        match read(&text) {
            Err(YamlError::Syntax(message)) if message.contains("invalid indentation in quoted scalar") => {
                let Some(start) = error_line(&message) else { break };
                continuation = if continuation.0 == start { (start, continuation.1 + 1) } else { (start, 1) };
                match reindented(&text, start + continuation.1) {
                    Some(fixed) => text = std::borrow::Cow::Owned(fixed),
                    None => break,
                }
            }
            _ => break,
        }
    }
    let text = text.as_ref();
    match read(text) {
        // yaml-rust2 refuses a surrogate pair written as two escapes (`"\ud83c\udf89"`, what
        // JavaScript's JSON.stringify writes); YAML's own form for it is one `\U` escape.
        Err(YamlError::Syntax(message)) if message.contains("invalid Unicode character escape") => {
            match combine_surrogate_escapes(text) {
                Some(combined) => read(&combined),
                None => Err(YamlError::Syntax(message)),
            }
        }
        other => other,
    }
}

const MAX_REINDENTED_LINES: usize = 64;

/// The line a scanner error names (`… line L column C`).
fn error_line(message: &str) -> Option<usize> {
    message.split(" line ").nth(1)?.split_whitespace().next()?.parse().ok()
}

/// The text with line `line` (from 1) indented 64 spaces more.
fn reindented(text: &str, line: usize) -> Option<String> {
    let mut lines: Vec<String> = text.split('\n').map(str::to_owned).collect();
    lines.get_mut(line.checked_sub(1)?)?.insert_str(0, &" ".repeat(64));
    Some(lines.join("\n"))
}

/// The text with every `\uD8xx\uDCxx` escape pair written as one `\UXXXXXXXX` escape; `None`
/// when it has none.
fn combine_surrogate_escapes(text: &str) -> Option<String> {
    static PAIR: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(r"\\u([dD][89abAB][0-9a-fA-F]{2})\\u([dD][c-fC-F][0-9a-fA-F]{2})").expect("valid regex")
    });
    PAIR.is_match(text).then(|| {
        PAIR.replace_all(text, |pair: &regex::Captures<'_>| {
            let high = u32::from_str_radix(&pair[1], 16).unwrap_or(0);
            let low = u32::from_str_radix(&pair[2], 16).unwrap_or(0);
            format!("\\U{:08X}", 0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))
        })
        .into_owned()
    })
}

/// Parses one document into `T`; an empty document is `null`.
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, YamlError> {
    let value = parse(text)?.unwrap_or(Value::Null);
    serde_json::from_value(value).map_err(|err| YamlError::Shape(err.to_string()))
}

struct Reader<'a> {
    parser: Parser<std::str::Chars<'a>>,
    text: &'a str,
    /// Each anchored value and what it holds.
    anchors: HashMap<usize, (Value, Size)>,
    /// What was made so far, aliases counted as what they copy.
    size: Size,
}

impl Reader<'_> {
    fn next(&mut self) -> Result<(Event, Marker), YamlError> {
        self.parser.next_token().map_err(|err| YamlError::Syntax(err.to_string()))
    }

    fn document(&mut self) -> Result<Option<Value>, YamlError> {
        let mut value = None;
        loop {
            match self.next()? {
                (Event::StreamStart | Event::DocumentEnd, _) => {}
                (Event::StreamEnd, _) => return Ok(value),
                (Event::DocumentStart, mark) => {
                    if value.is_some() {
                        return Err(value_error(mark, "expected one YAML document, found more"));
                    }
                    let (event, mark) = self.next()?;
                    value = Some(self.node(event, mark)?);
                }
                (event, mark) => return Err(value_error(mark, format!("unexpected YAML event {event:?}"))),
            }
        }
    }

    /// Counts what was made at `mark`, refusing a document past [`MAX_VALUES`] or
    /// [`MAX_TEXT_BYTES`].
    fn count(&mut self, made: Size, mark: Marker) -> Result<(), YamlError> {
        self.size = self.size.plus(made);
        match self.size.excess() {
            Some(what) => Err(YamlError::TooLarge { line: mark.line(), column: mark.col() + 1, what }),
            None => Ok(()),
        }
    }

    fn node(&mut self, event: Event, mark: Marker) -> Result<Value, YamlError> {
        if let Event::Alias(anchor) = event {
            let (value, count) = self.anchors.get(&anchor).ok_or_else(|| value_error(mark, "unknown alias"))?;
            let (value, count) = (value.clone(), *count);
            self.count(count, mark)?;
            return Ok(value);
        }
        let before = self.size;
        let text = if let Event::Scalar(text, ..) = &event { text.len() } else { 0 };
        self.count(Size { values: 1, text }, mark)?;
        let (value, anchor) = self.collection_or_scalar(event, mark)?;
        if anchor != 0 {
            self.anchors.insert(anchor, (value.clone(), self.size.minus(before)));
        }
        Ok(value)
    }

    fn collection_or_scalar(&mut self, event: Event, mark: Marker) -> Result<(Value, usize), YamlError> {
        Ok(match event {
            Event::Scalar(text, style, anchor, tag) => (self.scalar(&text, style, tag.as_ref(), mark)?, anchor),
            Event::SequenceStart(anchor, tag) => {
                self.collection_tag(tag.as_ref(), "seq", mark)?;
                let mut items = Vec::new();
                loop {
                    match self.next()? {
                        (Event::SequenceEnd, _) => break,
                        (event, mark) => items.push(self.node(event, mark)?),
                    }
                }
                (Value::Array(items), anchor)
            }
            Event::MappingStart(anchor, tag) => {
                self.collection_tag(tag.as_ref(), "map", mark)?;
                let mut object = Map::new();
                loop {
                    let (event, key_mark) = match self.next()? {
                        (Event::MappingEnd, _) => break,
                        next => next,
                    };
                    self.check_key(&event, key_mark)?;
                    let key = object_key(self.node(event, key_mark)?);
                    let (event, mark) = self.next()?;
                    let value = self.node(event, mark)?;
                    if object.insert(key, value).is_some() {
                        return Err(value_error(key_mark, "duplicated mapping key"));
                    }
                }
                (Value::Object(object), anchor)
            }
            other => return Err(value_error(mark, format!("unexpected YAML event {other:?}"))),
        })
    }

    /// Refuses what js-yaml cannot read as a mapping key: nothing at all (`: v`) and a tagged
    /// collection (`!!map {}: v`).
    fn check_key(&self, event: &Event, mark: Marker) -> Result<(), YamlError> {
        match event {
            Event::Scalar(text, TScalarStyle::Plain, _, None) if is_empty_plain(text) => {
                Err(value_error(mark, "a mapping key is missing"))
            }
            Event::SequenceStart(_, Some(_)) | Event::MappingStart(_, Some(_)) => {
                Err(value_error(mark, "a tagged collection cannot be a mapping key"))
            }
            _ => Ok(()),
        }
    }

    fn collection_tag(&self, tag: Option<&Tag>, allowed: &str, mark: Marker) -> Result<(), YamlError> {
        match tag.map(core_name) {
            None => Ok(()),
            Some(Some(name)) if name == allowed => Ok(()),
            Some(_) => Err(self.tag_error(tag.expect("matched Some"), mark)),
        }
    }

    fn scalar(&self, text: &str, style: TScalarStyle, tag: Option<&Tag>, mark: Marker) -> Result<Value, YamlError> {
        let Some(tag) = tag else {
            return match style {
                TScalarStyle::Plain => plain(text).map_err(|message| value_error(mark, message)),
                _ => Ok(Value::String(text.to_owned())),
            };
        };
        let cannot =
            |what: &str| value_error(mark, format!("cannot read {} as !!{what}", dsh_abi::js::to_string(text)));
        match core_name(tag) {
            Some("str") => Ok(Value::String(text.to_owned())),
            Some("null") if is_null(text) && style == TScalarStyle::Plain => Ok(Value::Null),
            Some("bool") => is_bool(text).map(Value::Bool).ok_or_else(|| cannot("bool")),
            Some("int") => integer(text).ok_or_else(|| cannot("int")),
            Some("float") => match float(text) {
                Some(Ok(number)) => Ok(number),
                Some(Err(message)) => Err(value_error(mark, message)),
                None => Err(cannot("float")),
            },
            Some("null") => Err(cannot("null")),
            _ => Err(self.tag_error(tag, mark)),
        }
    }

    fn tag_error(&self, tag: &Tag, mark: Marker) -> YamlError {
        let (line, column) = (mark.line(), tag_column(self.text, mark.line(), mark.col()));
        match core_name(tag) {
            Some("js") => YamlError::JsTag { line, column },
            Some(name) => YamlError::UnsupportedTag { line, column, tag: format!("!!{name}") },
            None if tag.handle.is_empty() || tag.handle == "!" => {
                YamlError::UnsupportedTag { line, column, tag: format!("!{}", tag.suffix) }
            }
            None => YamlError::UnsupportedTag { line, column, tag: format!("{}{}", tag.handle, tag.suffix) },
        }
    }
}

const CORE_PREFIX: &str = "tag:yaml.org,2002:";

/// `str` for `!!str` or `!<tag:yaml.org,2002:str>`.
fn core_name(tag: &Tag) -> Option<&str> {
    match (tag.handle.as_str(), tag.suffix.strip_prefix(CORE_PREFIX)) {
        (CORE_PREFIX, _) => Some(&tag.suffix),
        ("!!", _) => Some(&tag.suffix),
        ("" | "!", Some(name)) => Some(name),
        _ => None,
    }
}

fn value_error(mark: Marker, message: impl Into<String>) -> YamlError {
    YamlError::Value { line: mark.line(), column: mark.col() + 1, message: message.into() }
}

/// The 1-based column of the tag that ends before `marker_column` on `line` (the parser marks
/// the tagged node, which starts after its tag).
fn tag_column(text: &str, line: usize, marker_column: usize) -> usize {
    let Some(source) = text.lines().nth(line.saturating_sub(1)) else {
        return marker_column + 1;
    };
    let before: String = source.chars().take(marker_column).collect();
    before.rfind('!').map(|end| before[..=end].trim_end_matches('!').len() + 1).unwrap_or(marker_column + 1)
}

fn is_null(text: &str) -> bool {
    matches!(text, "~" | "null" | "Null" | "NULL")
}

/// A plain scalar with nothing in it (`key:` with no value) is null.
fn is_empty_plain(text: &str) -> bool {
    text.is_empty()
}

fn is_bool(text: &str) -> Option<bool> {
    match text {
        "true" | "True" | "TRUE" => Some(true),
        "false" | "False" | "FALSE" => Some(false),
        _ => None,
    }
}

/// A plain scalar's value.
fn plain(text: &str) -> Result<Value, String> {
    if is_null(text) || is_empty_plain(text) {
        return Ok(Value::Null);
    }
    if let Some(flag) = is_bool(text) {
        return Ok(Value::Bool(flag));
    }
    if let Some(number) = integer(text) {
        return Ok(number);
    }
    match float(text) {
        Some(number) => number,
        None => Ok(Value::String(text.to_owned())),
    }
}

/// js-yaml's integer: an optional sign, then `0`, `0b…`, `0x…`, `0o…` (lower-case) or decimal
/// digits (leading zeros allowed).
fn integer(text: &str) -> Option<Value> {
    let (negative, body) = match text.as_bytes().first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    let (radix, digits) = match body.get(..2) {
        Some("0b") => (2, &body[2..]),
        Some("0x") => (16, &body[2..]),
        Some("0o") => (8, &body[2..]),
        _ => (10, body),
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    Some(match u64::from_str_radix(digits, radix) {
        Ok(magnitude) if !negative => Value::from(magnitude),
        Ok(magnitude) if magnitude <= i64::MAX as u64 + 1 => Value::from((magnitude as i128).wrapping_neg() as i64),
        _ => {
            let magnitude = match radix {
                10 => digits.parse::<f64>().ok()?,
                _ => digits
                    .chars()
                    .fold(0f64, |acc, c| acc * f64::from(radix) + f64::from(c.to_digit(radix).unwrap_or(0))),
            };
            let number = if negative { -magnitude } else { magnitude };
            Value::Number(Number::from_f64(number)?)
        }
    })
}

/// js-yaml's float: `[-+]?digits(.digits?)?(e[-+]?digits)?`, `.digits(e…)?` (no sign), `.inf`,
/// `.nan`. `Some(Err)` for `.inf`/`.nan` (refused: JSON has no such numbers); `None` when the
/// text is no float (or overflows, as js-yaml leaves `1e400` a string).
fn float(text: &str) -> Option<Result<Value, String>> {
    let lowered = text.trim_start_matches(['-', '+']);
    if matches!(lowered, ".inf" | ".Inf" | ".INF") || matches!(text, ".nan" | ".NaN" | ".NAN") {
        return Some(Err(format!("{text} is not a number JSON can hold (dsh refuses .inf and .nan)")));
    }
    if !is_float_text(text) {
        return None;
    }
    let number: f64 = text.parse().ok()?;
    number.is_finite().then(|| Ok(json_number(number)))
}

fn is_float_text(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut at = 0;
    let digits = |at: &mut usize| {
        let start = *at;
        while *at < bytes.len() && bytes[*at].is_ascii_digit() {
            *at += 1;
        }
        *at > start
    };
    if bytes.first() == Some(&b'.') {
        at = 1;
        if !digits(&mut at) {
            return false;
        }
    } else {
        if matches!(bytes.first(), Some(b'-' | b'+')) {
            at = 1;
        }
        if !digits(&mut at) {
            return false;
        }
        if bytes.get(at) == Some(&b'.') {
            at += 1;
            digits(&mut at);
        }
    }
    if matches!(bytes.get(at), Some(b'e' | b'E')) {
        at += 1;
        if matches!(bytes.get(at), Some(b'-' | b'+')) {
            at += 1;
        }
        if !digits(&mut at) {
            return false;
        }
    }
    at == bytes.len()
}

/// A number as JavaScript holds it: an integral value is an integer.
fn json_number(number: f64) -> Value {
    if number.fract() == 0.0 && number.abs() < 9_007_199_254_740_992.0 {
        Value::from(number as i64)
    } else {
        Number::from_f64(number).map_or(Value::Null, Value::Number)
    }
}

/// A mapping key as JavaScript makes it a property name (`String(key)`).
fn object_key(key: Value) -> String {
    match key {
        Value::String(text) => text,
        Value::Object(_) => "[object Object]".to_owned(),
        Value::Array(items) => items
            .into_iter()
            .map(|item| match item {
                Value::Null => String::new(),
                other => object_key(other),
            })
            .collect::<Vec<_>>()
            .join(","),
        Value::Number(number) if number.is_f64() => {
            number.as_f64().map_or_else(|| number.to_string(), dsh_abi::js::number)
        }
        other => other.to_string(),
    }
}

/// Writes a value as a YAML document (block style); it reads back as the same value.
pub fn to_string(value: &Value) -> String {
    let mut out = String::new();
    match value {
        Value::Array(items) if !items.is_empty() => write_sequence(&mut out, items, 0),
        Value::Object(object) if !object.is_empty() => write_mapping(&mut out, object, 0),
        scalar => {
            out.push_str(&scalar_text(scalar));
            out.push('\n');
        }
    }
    out
}

fn indent(out: &mut String, level: usize) {
    out.extend(std::iter::repeat_n(' ', level));
}

fn write_sequence(out: &mut String, items: &[Value], level: usize) {
    for item in items {
        indent(out, level);
        out.push('-');
        match item {
            Value::Object(object) if !object.is_empty() => {
                out.push(' ');
                let mut first = true;
                for (key, value) in object {
                    if !first {
                        indent(out, level + 2);
                    }
                    first = false;
                    write_entry(out, key, value, level + 2);
                }
            }
            Value::Array(inner) if !inner.is_empty() => {
                out.push('\n');
                write_sequence(out, inner, level + 2);
            }
            scalar => {
                out.push(' ');
                out.push_str(&scalar_text(scalar));
                out.push('\n');
            }
        }
    }
}

fn write_mapping(out: &mut String, object: &Map<String, Value>, level: usize) {
    for (key, value) in object {
        indent(out, level);
        write_entry(out, key, value, level);
    }
}

/// `key: value` at the current position (the indentation is written), nested values below.
fn write_entry(out: &mut String, key: &str, value: &Value, level: usize) {
    out.push_str(&string_text(key));
    out.push(':');
    match value {
        Value::Object(object) if !object.is_empty() => {
            out.push('\n');
            write_mapping(out, object, level + 2);
        }
        Value::Array(items) if !items.is_empty() => {
            out.push('\n');
            write_sequence(out, items, level + 2);
        }
        scalar => {
            out.push(' ');
            out.push_str(&scalar_text(scalar));
            out.push('\n');
        }
    }
}

fn scalar_text(value: &Value) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(flag) => flag.to_string(),
        Value::Number(number) if number.is_f64() => {
            number.as_f64().map_or_else(|| number.to_string(), dsh_abi::js::number)
        }
        Value::Number(number) => number.to_string(),
        Value::String(text) => string_text(text),
        Value::Array(_) => "[]".to_owned(),
        Value::Object(_) => "{}".to_owned(),
    }
}

/// A string as a plain scalar when that reads back as the same string in block context, else
/// double-quoted (JSON's escapes are YAML's).
fn string_text(text: &str) -> String {
    let plain_safe = !text.is_empty()
        && text.trim() == text
        && !text.starts_with([
            '-', '?', ':', ',', '[', ']', '{', '}', '#', '&', '*', '!', '|', '>', '\'', '"', '%', '@', '`',
        ])
        && !text.contains(": ")
        && !text.contains(" #")
        && !text.ends_with(':')
        && !text.chars().any(char::is_control)
        && !text.starts_with("---")
        && !text.starts_with("...")
        && matches!(plain(text), Ok(Value::String(_)));
    if plain_safe {
        text.to_owned()
    } else {
        dsh_abi::js::to_string(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_js_tag_is_refused_with_its_position_and_what_to_use_instead() {
        let err = parse("- id: llm\n  config:\n    apiKey: !!js process.env.KEY\n").unwrap_err();
        assert_eq!(err, YamlError::JsTag { line: 3, column: 13 });
        assert!(err.to_string().contains("apiKeyEnv: NAME"), "{err}");
    }

    #[test]
    fn a_js_tag_in_verbatim_form_or_on_a_collection_is_refused() {
        assert!(matches!(parse("- !<tag:yaml.org,2002:js> x\n"), Err(YamlError::JsTag { .. })));
        assert!(matches!(parse("- !!js [1]\n"), Err(YamlError::JsTag { .. })));
    }

    #[test]
    fn js_inside_a_quoted_string_or_comment_is_just_text() {
        assert_eq!(parse("- \"!!js not a tag\" # !!js\n").unwrap(), Some(json!(["!!js not a tag"])));
    }

    #[test]
    fn core_tags_convert_and_other_tags_are_refused() {
        assert_eq!(
            parse("- !!str 5\n- !!int \"7\"\n- !!float 1\n- !!null ~\n").unwrap(),
            Some(json!(["5", 7, 1, null]))
        );
        assert!(matches!(parse("- !custom x\n"), Err(YamlError::UnsupportedTag { ref tag, .. }) if tag == "!custom"));
        assert!(
            matches!(parse("- !!binary aGk=\n"), Err(YamlError::UnsupportedTag { ref tag, .. }) if tag == "!!binary")
        );
        assert!(matches!(parse("- !!bool yes\n"), Err(YamlError::Value { .. })));
    }

    #[test]
    fn plain_scalars_resolve_as_js_yaml_json_schema_does() {
        let value = parse("[017, 08, 0x1F, 0o17, 0b101, 1_000, +.5, .5, 0., 1e400, 1.0, True, yes, ~, '1', 12:30]")
            .unwrap()
            .unwrap();
        assert_eq!(
            value,
            json!([17, 8, 31, 15, 5, "1_000", "+.5", 0.5, 0, "1e400", 1, true, "yes", null, "1", "12:30"])
        );
    }

    #[test]
    fn infinities_and_nan_are_refused_with_their_line() {
        let err = parse("- a\n- .inf\n").unwrap_err();
        assert!(matches!(err, YamlError::Value { line: 2, .. }), "{err}");
    }

    #[test]
    fn big_integers_are_kept_exact() {
        assert_eq!(parse("- 12345678901234567890\n").unwrap(), Some(json!([12345678901234567890u64])));
    }

    #[test]
    fn keys_become_strings_as_javascript_makes_them_and_duplicates_are_refused() {
        assert_eq!(
            parse("{1.0: a, [1, 2]: b, true: c, ~: d}").unwrap(),
            Some(json!({"1": "a", "1,2": "b", "true": "c", "null": "d"}))
        );
        let err = parse("a: 1\nconfig: {1: first, \"1\": second}\n").unwrap_err();
        assert!(
            matches!(&err, YamlError::Value { line: 2, message, .. } if message == "duplicated mapping key"),
            "{err}"
        );
    }

    #[test]
    fn a_byte_order_mark_and_surrogate_escapes_are_read() {
        assert_eq!(parse("\u{feff}- a\n- b\n").unwrap(), Some(json!(["a", "b"])));
        assert_eq!(parse("- \"\\ud83c\\udf89\"\n").unwrap(), Some(json!(["\u{1F389}"])));
    }

    #[test]
    fn an_empty_or_comment_only_document_has_no_content() {
        assert_eq!(parse("").unwrap(), None);
        assert_eq!(parse("# nothing here\n\n").unwrap(), None);
        assert_eq!(parse("null\n").unwrap(), Some(Value::Null));
        assert_eq!(parse("[]\n").unwrap(), Some(json!([])));
    }

    #[test]
    fn syntax_errors_carry_line_and_column() {
        let err = parse("- id: a\n  bad: [unclosed\n").unwrap_err();
        assert!(matches!(&err, YamlError::Syntax(message) if message.contains("line")), "{err}");
    }

    #[test]
    fn key_order_is_kept() {
        let value = parse("z: 1\na: 2\n3: x\n").unwrap().unwrap();
        assert_eq!(serde_json::to_string(&value).unwrap(), r#"{"z":1,"a":2,"3":"x"}"#);
    }

    #[test]
    fn aliases_are_copies() {
        assert_eq!(parse("- &a {x: 1}\n- *a\n").unwrap(), Some(json!([{"x": 1}, {"x": 1}])));
    }

    #[test]
    fn values_round_trip_through_yaml_text() {
        let value = json!([{"id": "a", "config": {"list": [1, 2.5, "x", "0o17", "yes", "", " pad", "a: b"], "flag": true, "none": null, "nested": [[1], []]}}]);
        assert_eq!(parse(&to_string(&value)).unwrap(), Some(value));
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        fn json_values() -> impl Strategy<Value = Value> {
            let leaf = prop_oneof![
                Just(Value::Null),
                any::<bool>().prop_map(Value::Bool),
                any::<i64>().prop_map(Value::from),
                (-1e12f64..1e12).prop_map(json_number),
                r#"[a-zA-Z0-9 !#:_.+~'"\[\]{},\\-]{0,12}"#.prop_map(Value::String),
            ];
            leaf.prop_recursive(3, 24, 4, |inner| {
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                    prop::collection::vec(("[a-z0-9 :#-]{1,6}", inner), 0..4)
                        .prop_map(|pairs| Value::Object(pairs.into_iter().collect())),
                ]
            })
        }

        proptest! {
            #[test]
            fn any_json_value_survives_a_yaml_round_trip(value in json_values()) {
                prop_assert_eq!(parse(&to_string(&value)).unwrap(), Some(value));
            }

            #[test]
            fn parsing_arbitrary_text_never_panics(text in "[ -~\\n]{0,80}") {
                let _ = parse(&text);
            }
        }
    }
}

#[cfg(test)]
mod limits {
    use super::*;

    /// `[&a [998 zeros], *a × aliases, extra…]`: 1 + 999 × (aliases + 1) + extra values.
    fn expanding(aliases: usize, extra: usize) -> String {
        let anchored = vec!["0"; 998].join(",");
        let mut items = vec![format!("&a [{anchored}]")];
        items.extend(std::iter::repeat_n("*a".to_owned(), aliases));
        items.extend(std::iter::repeat_n("0".to_owned(), extra));
        format!("[{}]", items.join(", "))
    }

    #[test]
    fn a_document_of_exactly_the_value_limit_is_read_and_one_value_more_is_refused() {
        let exact = parse(&expanding(1000, 0)).unwrap().unwrap();
        assert_eq!(exact.as_array().unwrap().len(), 1001);
        let err = parse(&expanding(1000, 1)).unwrap_err();
        assert!(matches!(err, YamlError::TooLarge { line: 1, .. }), "{err}");
        assert!(err.to_string().contains("more than 1000000 values"), "{err}");
    }

    #[test]
    fn an_alias_bomb_of_a_few_hundred_bytes_is_refused_before_it_expands() {
        let mut bomb = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for level in 1..10 {
            let previous = format!("*a{}", level - 1);
            bomb.push_str(&format!("a{level}: &a{level} [{}]\n", vec![previous; 10].join(", ")));
        }
        assert!(bomb.len() < 600, "{}", bomb.len());
        let err = parse(&bomb).unwrap_err();
        assert!(matches!(err, YamlError::TooLarge { .. }), "{err}");
    }

    #[test]
    fn an_alias_of_long_text_copied_past_the_text_limit_is_refused() {
        let text = "x".repeat(1024 * 1024);
        let copies = vec!["*t"; MAX_TEXT_BYTES >> 20].join(", ");
        let err = parse(&format!("[&t {text}, {copies}]")).unwrap_err();
        assert!(err.to_string().contains("more than 32 MiB of text"), "{err}");
        let fewer = vec!["*t"; (MAX_TEXT_BYTES >> 20) - 1].join(", ");
        parse(&format!("[&t {text}, {fewer}]")).unwrap();
    }

    #[test]
    fn nesting_too_deep_to_read_is_refused_without_overflowing_the_stack() {
        let err = parse(&"[".repeat(100_000)).unwrap_err();
        assert!(err.to_string().contains("recursion limit exceeded"), "{err}");
    }
}
