//! JSON the way JavaScript writes and reads it.
//!
//! Records, policy keys and log lines are compared with the TypeScript reference byte for byte,
//! so numbers are written as JavaScript's `String(n)` writes them (`500`, `0.1`, `1e+21`, never
//! `500.0`) and read as JavaScript reads them (`1` and `1.0` are the same safe integer). Keys are
//! written in the order the serialised type gives them.

use std::io;

use serde::Serialize;
use serde_json::ser::{Formatter, PrettyFormatter};

mod object;

pub use object::{write_object, write_string, Field, ObjectWriter};

/// The largest integer a double represents exactly: `Number.MAX_SAFE_INTEGER`.
pub const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;

/// A serde_json formatter that writes floating-point numbers with JavaScript's formatting.
#[derive(Clone, Copy, Debug, Default)]
pub struct JsFormatter;

impl Formatter for JsFormatter {
    fn write_f64<W: ?Sized + io::Write>(&mut self, writer: &mut W, value: f64) -> io::Result<()> {
        with_number_text(value, |text| writer.write_all(text.as_bytes()))
    }

    fn write_f32<W: ?Sized + io::Write>(&mut self, writer: &mut W, value: f32) -> io::Result<()> {
        self.write_f64(writer, f64::from(value))
    }
}

/// `String(value)` for a finite number; `null` for NaN and infinities, as `JSON.stringify` does.
pub fn number(value: f64) -> String {
    with_number_text(value, str::to_owned)
}

/// Hands `number(value)` to `use_text` without allocating it.
fn with_number_text<R>(value: f64, use_text: impl FnOnce(&str) -> R) -> R {
    if is_safe_integer(value) {
        // Integral doubles in the safe range convert to i64 exactly, and JavaScript writes them
        // as plain digits (`-0` as `0`), as itoa does.
        use_text(itoa::Buffer::new().format(value as i64))
    } else if value.is_finite() {
        use_text(ryu_js::Buffer::new().format_finite(value))
    } else {
        use_text("null")
    }
}

/// `String(value)` for any number: `NaN`, `Infinity` and `-Infinity` as JavaScript writes them.
pub fn string(value: f64) -> String {
    if value.is_nan() {
        "NaN".to_owned()
    } else if value.is_infinite() {
        if value > 0.0 { "Infinity" } else { "-Infinity" }.to_owned()
    } else {
        number(value)
    }
}

/// Valid JSON text on one line: every whitespace byte outside strings dropped, everything else
/// (key order, number text, string escapes) kept byte for byte. Whitespace inside a JSON string
/// is always escaped, so the result has no line break.
pub fn minify(json: &str) -> String {
    // The bytes of a multi-byte UTF-8 character are never ASCII, so quotes, backslashes and
    // whitespace found byte by byte are always whole characters. Strings are skipped whole, and
    // text that is already compact (every record dsh's own plugins write) is copied once.
    let bytes = json.as_bytes();
    let mut compact: Option<Vec<u8>> = None;
    let (mut kept_from, mut at) = (0, 0);
    while let Some(offset) = bytes[at..].iter().position(|&byte| matches!(byte, b'"' | b' ' | b'\t' | b'\n' | b'\r')) {
        at += offset;
        if bytes[at] == b'"' {
            at = after_string(bytes, at + 1);
        } else {
            compact.get_or_insert_with(|| Vec::with_capacity(bytes.len())).extend_from_slice(&bytes[kept_from..at]);
            at += 1;
            kept_from = at;
        }
    }
    match compact {
        None => json.to_owned(),
        Some(mut out) => {
            out.extend_from_slice(&bytes[kept_from..]);
            String::from_utf8(out).expect("only ASCII whitespace was dropped from valid UTF-8")
        }
    }
}

/// Where the text after the string whose contents start at `at` begins, skipping escapes.
fn after_string(bytes: &[u8], mut at: usize) -> usize {
    while let Some(offset) = first_to_escape(&bytes[at..]) {
        let found = at + offset;
        match bytes[found] {
            b'"' => return found + 1,
            b'\\' => at = (found + 2).min(bytes.len()),
            _ => at = found + 1,
        }
    }
    bytes.len()
}

const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
const LOW_BITS: u64 = u64::from_ne_bytes([0x7f; 8]);
const HIGH_BITS: u64 = u64::from_ne_bytes([0x80; 8]);
/// Multiplying the bits at 0, 8, …, 56 by this gathers them, in order, into the top byte.
const GATHER: u64 = 0x0102_0408_1020_4080;

/// The offset of the first byte a JSON string cannot hold as itself: `"`, `\` or a control
/// character (below 0x20). Reading, it ends a run of plain text; writing, it is escaped.
pub fn first_to_escape(bytes: &[u8]) -> Option<usize> {
    let mut offset = 0;
    while let Some(block) = bytes.get(offset..offset + BLOCK) {
        let found = escape_mask(block.try_into().expect("a block"));
        if found != 0 {
            return Some(offset + found.trailing_zeros() as usize);
        }
        offset += BLOCK;
    }
    let tail = bytes[offset..].iter().position(|&byte| needs_escape(byte));
    tail.map(|position| offset + position)
}

/// How many bytes [`escape_mask`] looks at.
pub const BLOCK: usize = 16;

/// One bit for each byte of `block` that [`first_to_escape`] stops at, bit 0 for the first byte.
/// Exact, so a reader may take the flagged bytes of a block one after another. With one SSE2
/// comparison where the processor has it (every x86-64 does), else eight bytes at a time.
pub fn escape_mask(block: &[u8; BLOCK]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    return sse2::escape_mask(block);
    #[cfg(not(target_arch = "x86_64"))]
    return escape_mask_by_words(block);
}

fn needs_escape(byte: u8) -> bool {
    byte == b'"' || byte == b'\\' || byte < 0x20
}

#[cfg_attr(target_arch = "x86_64", allow(dead_code, reason = "the fallback; its tests run everywhere"))]
fn escape_mask_by_words(block: &[u8; BLOCK]) -> u32 {
    let (low, high) = block.split_at(8);
    word_mask(low) | word_mask(high) << 8
}

/// One bit for each byte of an eight-byte `word` to escape.
fn word_mask(word: &[u8]) -> u32 {
    let word = u64::from_le_bytes(word.try_into().expect("eight bytes"));
    let flagged = zero_bytes(word ^ (ONES * u64::from(b'"')))
        | zero_bytes(word ^ (ONES * u64::from(b'\\')))
        | bytes_below_space(word);
    ((flagged >> 7).wrapping_mul(GATHER) >> 56) as u32
}

/// The high bit of exactly the bytes of `word` that are zero (no carry crosses a byte: each
/// sum is at most 0xfe).
fn zero_bytes(word: u64) -> u64 {
    !(((word & LOW_BITS) + LOW_BITS) | word) & HIGH_BITS
}

/// The high bit of exactly the bytes of `word` below 0x20.
fn bytes_below_space(word: u64) -> u64 {
    !(((word & LOW_BITS) + ONES * 0x60) | word) & HIGH_BITS
}

#[cfg(target_arch = "x86_64")]
mod sse2 {
    use std::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_min_epu8, _mm_movemask_epi8, _mm_or_si128, _mm_set1_epi8,
    };

    pub(super) fn escape_mask(block: &[u8; super::BLOCK]) -> u32 {
        // SAFETY: SSE2 is part of every x86-64 processor, and the unaligned load reads exactly
        // the sixteen bytes `block` borrows.
        unsafe {
            let bytes = _mm_loadu_si128(block.as_ptr().cast::<__m128i>());
            let quote = _mm_cmpeq_epi8(bytes, _mm_set1_epi8(b'"' as i8));
            let backslash = _mm_cmpeq_epi8(bytes, _mm_set1_epi8(b'\\' as i8));
            let control = _mm_cmpeq_epi8(_mm_min_epu8(bytes, _mm_set1_epi8(0x1f)), bytes);
            _mm_movemask_epi8(_mm_or_si128(_mm_or_si128(quote, backslash), control)) as u32
        }
    }
}

/// Compact JSON with JavaScript number formatting, keys in serialisation order.
pub fn to_string<T: Serialize + ?Sized>(value: &T) -> String {
    let mut out = Vec::with_capacity(128);
    let mut serializer = serde_json::Serializer::with_formatter(&mut out, JsFormatter);
    value.serialize(&mut serializer).expect("serialising to memory cannot fail for these types");
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

/// Indented JSON (two spaces, as `JSON.stringify(value, null, 2)`) with JavaScript number
/// formatting: what every `--json` document prints.
pub fn to_string_pretty<T: Serialize + ?Sized>(value: &T) -> String {
    let mut out = Vec::with_capacity(256);
    let mut serializer = serde_json::Serializer::with_formatter(&mut out, JsPretty(PrettyFormatter::new()));
    value.serialize(&mut serializer).expect("serialising to memory cannot fail for these types");
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

/// serde_json's indentation, JavaScript's numbers.
struct JsPretty<'a>(PrettyFormatter<'a>);

impl Formatter for JsPretty<'_> {
    fn write_f64<W: ?Sized + io::Write>(&mut self, writer: &mut W, value: f64) -> io::Result<()> {
        JsFormatter.write_f64(writer, value)
    }

    fn write_f32<W: ?Sized + io::Write>(&mut self, writer: &mut W, value: f32) -> io::Result<()> {
        JsFormatter.write_f32(writer, value)
    }

    fn begin_array<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.begin_array(writer)
    }

    fn end_array<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.end_array(writer)
    }

    fn begin_array_value<W: ?Sized + io::Write>(&mut self, writer: &mut W, first: bool) -> io::Result<()> {
        self.0.begin_array_value(writer, first)
    }

    fn end_array_value<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.end_array_value(writer)
    }

    fn begin_object<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.begin_object(writer)
    }

    fn end_object<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.end_object(writer)
    }

    fn begin_object_key<W: ?Sized + io::Write>(&mut self, writer: &mut W, first: bool) -> io::Result<()> {
        self.0.begin_object_key(writer, first)
    }

    fn begin_object_value<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.begin_object_value(writer)
    }

    fn end_object_value<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.end_object_value(writer)
    }
}

/// `2 ** exponent` exactly, as JavaScript computes it (infinite from 1024 on).
pub fn pow2(exponent: u64) -> f64 {
    if exponent >= 1024 {
        f64::INFINITY
    } else {
        f64::from_bits((exponent + 1023) << 52)
    }
}

/// Whether `value` is an integral double no larger than `Number.MAX_SAFE_INTEGER` in magnitude
/// (`Number.isSafeInteger`).
pub fn is_safe_integer(value: f64) -> bool {
    value.is_finite() && value.fract() == 0.0 && value.abs() <= MAX_SAFE_INTEGER
}

/// A JSON value as a non-negative safe integer (`1` and `1.0` alike).
pub fn as_safe_u64(value: &serde_json::Value) -> Option<u64> {
    let number = value.as_f64()?;
    (is_safe_integer(number) && number >= 0.0).then_some(number as u64)
}

/// `String(value)` for a JSON value; `None` (a missing key) is `undefined`.
pub fn display(value: Option<&serde_json::Value>) -> String {
    use serde_json::Value;
    match value {
        None => "undefined".to_owned(),
        Some(Value::Null) => "null".to_owned(),
        Some(Value::Bool(flag)) => flag.to_string(),
        Some(Value::Number(n)) => n.as_f64().map_or_else(|| n.to_string(), number),
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| match item {
                Value::Null => String::new(),
                other => display(Some(other)),
            })
            .collect::<Vec<_>>()
            .join(","),
        Some(Value::Object(_)) => "[object Object]".to_owned(),
    }
}

/// `a === b` for JSON values, `None` being `undefined`. Objects and arrays are never equal (they
/// would be distinct references).
pub fn strict_equals(a: Option<&serde_json::Value>, b: Option<&serde_json::Value>) -> bool {
    use serde_json::Value;
    match (a, b) {
        (None, None) => true,
        (Some(Value::Null), Some(Value::Null)) => true,
        (Some(Value::Bool(x)), Some(Value::Bool(y))) => x == y,
        (Some(Value::Number(x)), Some(Value::Number(y))) => x.as_f64() == y.as_f64(),
        (Some(Value::String(x)), Some(Value::String(y))) => x == y,
        _ => false,
    }
}

/// Orders strings by UTF-16 code units, as JavaScript's default `sort()` does.
pub fn cmp_utf16(a: &str, b: &str) -> std::cmp::Ordering {
    a.encode_utf16().cmp(b.encode_utf16())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn numbers_are_written_as_javascript_writes_them() {
        assert_eq!(number(500.0), "500");
        assert_eq!(number(0.1), "0.1");
        assert_eq!(number(1e-7), "1e-7");
        assert_eq!(number(1e21), "1e+21");
        assert_eq!(number(24.999999999999993), "24.999999999999993");
        assert_eq!(number(-0.0), "0");
        assert_eq!(number(f64::NAN), "null");
    }

    #[test]
    fn any_number_renders_as_javascript_string_does() {
        assert_eq!(string(f64::NAN), "NaN");
        assert_eq!(string(f64::NEG_INFINITY), "-Infinity");
        assert_eq!(string(1e308), "1e+308");
    }

    #[test]
    fn minified_json_keeps_strings_numbers_and_order() {
        let text = "{ \"b\" : [ 1.50 , 2e3 ],\n\t\"a\": \"x \\\" y\\\\\", \"c\": \"\\n\" }";
        assert_eq!(minify(text), r#"{"b":[1.50,2e3],"a":"x \" y\\","c":"\n"}"#);
    }

    #[test]
    fn serialised_values_keep_key_order_and_js_numbers() {
        let value = serde_json::json!({"b": 1.0, "a": [0.5, 10000.0], "s": "x\"y"});
        assert_eq!(to_string(&value), r#"{"b":1,"a":[0.5,10000],"s":"x\"y"}"#);
    }

    #[test]
    fn one_and_one_point_zero_are_the_same_safe_integer() {
        let one: serde_json::Value = serde_json::from_str("1").unwrap();
        let one_point_zero: serde_json::Value = serde_json::from_str("1.0").unwrap();
        assert_eq!(as_safe_u64(&one), Some(1));
        assert_eq!(as_safe_u64(&one_point_zero), Some(1));
        assert_eq!(as_safe_u64(&serde_json::json!(1.5)), None);
        assert_eq!(as_safe_u64(&serde_json::json!(9007199254740992.0)), None);
    }

    #[test]
    fn powers_of_two_are_exact_up_to_infinity() {
        assert_eq!(pow2(0), 1.0);
        assert_eq!(pow2(10), 1024.0);
        assert_eq!(pow2(1023), 2f64.powi(1023));
        assert_eq!(pow2(1024), f64::INFINITY);
    }

    #[test]
    fn values_render_as_javascript_string_does() {
        use serde_json::json;
        assert_eq!(display(None), "undefined");
        assert_eq!(display(Some(&json!(null))), "null");
        assert_eq!(display(Some(&json!(1.5))), "1.5");
        assert_eq!(display(Some(&json!(2.0))), "2");
        assert_eq!(display(Some(&json!("raw"))), "raw");
        assert_eq!(display(Some(&json!([1, null, "a"]))), "1,,a");
        assert_eq!(display(Some(&json!({"a": 1}))), "[object Object]");
    }

    #[test]
    fn strict_equality_compares_numbers_by_value_and_never_objects() {
        use serde_json::json;
        assert!(strict_equals(Some(&json!(1)), Some(&json!(1.0))));
        assert!(!strict_equals(Some(&json!(1)), Some(&json!("1"))));
        assert!(strict_equals(None, None));
        assert!(!strict_equals(Some(&json!({})), Some(&json!({}))));
    }

    #[test]
    fn utf16_order_differs_from_byte_order_above_the_bmp() {
        // U+FF5E is one UTF-16 unit (0xFF5E); U+1F600 starts with the surrogate 0xD83D.
        assert_eq!(cmp_utf16("\u{1F600}", "\u{FF5E}"), std::cmp::Ordering::Less);
        assert_eq!("\u{1F600}".cmp("\u{FF5E}"), std::cmp::Ordering::Greater);
    }

    proptest! {
        #[test]
        fn the_first_byte_to_escape_is_found_where_a_plain_search_finds_it(text in "[\u{0}-\u{7f}é😀]{0,80}") {
            let plain = text.bytes().position(|byte| byte == b'"' || byte == b'\\' || byte < 0x20);
            prop_assert_eq!(first_to_escape(text.as_bytes()), plain);
        }

        #[test]
        fn escape_masks_flag_exactly_the_bytes_to_escape(block in prop::array::uniform16(prop_oneof![
            Just(b'"'), Just(b'\\'), 0u8..0x21, 0x7eu8..=0xff, any::<u8>()
        ])) {
            let plain = (0..BLOCK).filter(|&at| needs_escape(block[at])).fold(0, |mask, at| mask | 1 << at);
            prop_assert_eq!(escape_mask(&block), plain);
            prop_assert_eq!(escape_mask_by_words(&block), plain);
        }

        #[test]
        fn formatted_numbers_parse_back_to_the_same_double(value in any::<f64>().prop_filter("finite", |v| v.is_finite())) {
            let text = number(value);
            let parsed: f64 = text.parse().unwrap();
            prop_assert_eq!(parsed, if value == 0.0 { 0.0 } else { value });
        }

        #[test]
        fn minifying_pretty_json_gives_the_compact_text(
            entries in prop::collection::vec(("[ a-z\"\\\\\n\té]{0,6}", "[ a-z\"\\\\\n\té]{0,12}", any::<i32>()), 0..6)
        ) {
            let value: serde_json::Map<String, serde_json::Value> = entries
                .into_iter()
                .map(|(key, text, number)| (key, serde_json::json!([text, number, {"nested": [text.len()]}])))
                .collect();
            let pretty = serde_json::to_string_pretty(&value).unwrap();
            prop_assert_eq!(minify(&pretty), serde_json::to_string(&value).unwrap());
        }

        #[test]
        fn safe_integers_are_written_as_ryu_js_writes_them(value in -9_007_199_254_740_991i64..=9_007_199_254_740_991) {
            let value = value as f64;
            let mut by_ryu = ryu_js::Buffer::new();
            prop_assert_eq!(number(value), by_ryu.format_finite(value));
        }

        #[test]
        fn minifying_any_text_keeps_every_byte_but_whitespace_outside_strings(text in "[ a\"\\\\\n\té{}:,]{0,40}") {
            let once = minify(&text);
            prop_assert_eq!(minify(&once), once.clone());
            let kept: String = text.chars().filter(|c| !matches!(c, ' ' | '\t' | '\n' | '\r')).collect();
            let dropped: String = once.chars().filter(|c| !matches!(c, ' ' | '\t' | '\n' | '\r')).collect();
            prop_assert_eq!(dropped, kept);
        }
    }
}
