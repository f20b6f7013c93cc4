//! JSON objects written straight into text, for the records written on every failed request:
//! the same bytes serde_json writes with [`JsFormatter`](super::JsFormatter), without its
//! per-token calls (a retry record took a third of a waterfall decision through serde).

use serde_json::value::RawValue;

use super::{first_to_escape, with_number_text};

/// One value of a field, as [`ObjectWriter`] and a type's `Serialize` both write it, so a type
/// declares its fields once (see [`Failure::fields`](crate::Failure::fields)).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Field<'a> {
    Text(&'a str),
    Unsigned(u64),
    Number(f64),
}

/// Writes one JSON object into a string: `write_object(capacity, |object| …)`.
pub struct ObjectWriter<'o> {
    out: &'o mut String,
    empty: bool,
}

/// The compact JSON object `write` writes, in a string of at least `capacity` bytes.
pub fn write_object(capacity: usize, write: impl FnOnce(&mut ObjectWriter<'_>)) -> String {
    let mut out = String::with_capacity(capacity);
    ObjectWriter::open(&mut out, write);
    out
}

impl<'o> ObjectWriter<'o> {
    fn open(out: &'o mut String, write: impl FnOnce(&mut ObjectWriter<'_>)) {
        out.push('{');
        let mut object = ObjectWriter { out, empty: true };
        write(&mut object);
        object.out.push('}');
    }

    pub fn field(&mut self, key: &str, value: Field<'_>) -> &mut Self {
        match value {
            Field::Text(text) => self.text(key, text),
            Field::Unsigned(number) => self.unsigned(key, number),
            Field::Number(number) => self.number(key, number),
        }
    }

    pub fn text(&mut self, key: &str, value: &str) -> &mut Self {
        self.key(key);
        write_string(self.out, value);
        self
    }

    pub fn unsigned(&mut self, key: &str, value: u64) -> &mut Self {
        self.key(key);
        self.out.push_str(itoa::Buffer::new().format(value));
        self
    }

    /// A number as JavaScript writes it (`null` when it is not finite).
    pub fn number(&mut self, key: &str, value: f64) -> &mut Self {
        self.key(key);
        with_number_text(value, |text| self.out.push_str(text));
        self
    }

    /// JSON text written as it is.
    pub fn raw(&mut self, key: &str, value: &RawValue) -> &mut Self {
        self.key(key);
        self.out.push_str(value.get());
        self
    }

    pub fn object(&mut self, key: &str, write: impl FnOnce(&mut ObjectWriter<'_>)) -> &mut Self {
        self.key(key);
        ObjectWriter::open(self.out, write);
        self
    }

    /// Keys are names chosen in code, written as they are (a debug build refuses one that would
    /// need escaping).
    fn key(&mut self, key: &str) {
        debug_assert!(first_to_escape(key.as_bytes()).is_none(), "the JSON key {key:?} needs escaping");
        if !std::mem::take(&mut self.empty) {
            self.out.push(',');
        }
        self.out.push('"');
        self.out.push_str(key);
        self.out.push_str("\":");
    }
}

/// `text` as a JSON string, escaped as serde_json and `JSON.stringify` escape it.
pub fn write_string(out: &mut String, text: &str) {
    out.push('"');
    let mut rest = text;
    while let Some(at) = first_to_escape(rest.as_bytes()) {
        out.push_str(&rest[..at]);
        let byte = rest.as_bytes()[at];
        match byte {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            0x08 => out.push_str("\\b"),
            0x0C => out.push_str("\\f"),
            _ => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.push_str("\\u00");
                out.push(char::from(HEX[usize::from(byte >> 4)]));
                out.push(char::from(HEX[usize::from(byte & 0xF)]));
            }
        }
        rest = &rest[at + 1..];
    }
    out.push_str(rest);
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn an_object_is_written_as_serde_json_writes_it() {
        let raw = RawValue::from_string(r#"[1,"a"]"#.to_owned()).unwrap();
        let written = write_object(0, |object| {
            object.text("a", "x\"\u{1}\u{7f}\u{2028}").unsigned("n", 7).number("f", 0.5).number("g", f64::NAN);
            object.raw("r", &raw).object("o", |_| {}).object("p", |inner| {
                inner.field("q", Field::Number(1e21));
            });
        });
        let expected = serde_json::json!({
            "a": "x\"\u{1}\u{7f}\u{2028}", "n": 7, "f": 0.5, "g": null, "r": [1, "a"], "o": {}, "p": {"q": 1e21}
        });
        assert_eq!(written, crate::js::to_string(&expected));
    }

    proptest! {
        #[test]
        fn any_text_is_escaped_as_serde_json_escapes_it(text in "[\u{0}-\u{7f}é😀\u{2028}]{0,40}") {
            let mut written = String::new();
            write_string(&mut written, &text);
            prop_assert_eq!(written, serde_json::to_string(&text).unwrap());
        }
    }
}
