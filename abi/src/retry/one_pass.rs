//! The record check's fast reading: one pass over a retry record that validates it as JSON,
//! drops the whitespace outside its strings, and picks out the three fields the host relies on
//! (`retryId`, `retry`, `delayMs`) and the two a screen shows (`maxRetries`, `headRetries`).
//!
//! It reads a subset of what serde_json reads, and gives up (`None`) on anything else: escapes in
//! a top-level key or in `retryId`, a `retry` or `delayMs` that is not a number or is repeated,
//! deep nesting. serde_json then reads the record, and its answer (and error message) stands. So
//! whatever this reading accepts, serde_json accepts with the same fields; the property tests of
//! `retry` and the `retry_record` fuzz target hold it to that.

use std::borrow::Cow;

use super::{number_value, Picked};
use crate::js::{escape_mask, first_to_escape, BLOCK};

/// Objects and arrays nested deeper than this are left to serde_json.
const MAX_NESTING: usize = 32;

/// The record's fields and its compact text, or `None` when serde_json must read it.
pub(super) fn read(text: &str) -> Option<(Picked<'_>, String)> {
    let bytes = text.as_bytes();
    let start = bytes.iter().position(|&byte| !is_whitespace(byte))?;
    let mut scan = Scan { text, bytes, at: start, kept_from: start, compact: None };
    let picked = scan.record()?;
    let end = scan.at;
    if !bytes[end..].iter().copied().all(is_whitespace) {
        return None;
    }
    let compact = match scan.compact {
        None => text[start..end].to_owned(),
        Some(mut kept) => {
            kept.extend_from_slice(&bytes[scan.kept_from..end]);
            String::from_utf8(kept).ok()?
        }
    };
    Some((picked, compact))
}

fn is_whitespace(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | b'\r')
}

struct Scan<'a> {
    text: &'a str,
    bytes: &'a [u8],
    at: usize,
    /// Where the text not yet copied into `compact` starts.
    kept_from: usize,
    /// The compact text so far, once some whitespace has been dropped.
    compact: Option<Vec<u8>>,
}

impl<'a> Scan<'a> {
    /// The top-level object, with the fields it names.
    fn record(&mut self) -> Option<Picked<'a>> {
        let mut picked = Picked::default();
        self.members(b'{', b'}', |scan| scan.record_member(&mut picked))?;
        Some(picked)
    }

    fn record_member(&mut self, picked: &mut Picked<'a>) -> Option<()> {
        let key = self.plain_string()?;
        self.colon()?;
        match key {
            "retryId" if picked.retry_id.is_none() => picked.retry_id = Some(Cow::Borrowed(self.plain_string()?)),
            "retry" if picked.retry.is_none() => picked.retry = Some(number_value(self.number()?)?),
            "delayMs" if picked.delay_ms.is_none() => picked.delay_ms = Some(self.number()?),
            "retryId" | "retry" | "delayMs" => return None,
            "maxRetries" => picked.max_retries = self.shown_value()?,
            "headRetries" => picked.head_retries = self.shown_value()?,
            _ => self.value(1)?,
        }
        Some(())
    }

    /// A container from `open` to `close`, each of its members read by `member`.
    fn members(&mut self, open: u8, close: u8, mut member: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.expect(open)?;
        if self.closes(close) {
            return Some(());
        }
        loop {
            member(self)?;
            if !self.next_member(close)? {
                return Some(());
            }
        }
    }

    /// The colon after a key, and the whitespace around it.
    fn colon(&mut self) -> Option<()> {
        self.skip_whitespace();
        self.expect(b':')?;
        self.skip_whitespace();
        Some(())
    }

    /// After a member: `Some(true)` past a comma, `Some(false)` past `close`.
    fn next_member(&mut self, close: u8) -> Option<bool> {
        self.skip_whitespace();
        let more = match self.peek()? {
            b',' => true,
            byte if byte == close => false,
            _ => return None,
        };
        self.at += 1;
        if more {
            self.skip_whitespace();
        }
        Some(more)
    }

    fn value(&mut self, depth: usize) -> Option<()> {
        match self.peek()? {
            b'"' => self.string().map(drop),
            b'{' => self.object(depth + 1),
            b'[' => self.array(depth + 1),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            b'-' | b'0'..=b'9' => self.number().map(drop),
            _ => None,
        }
    }

    /// A display-only member's value, read and then parsed on its own as [`super::shown_value`] does.
    fn shown_value(&mut self) -> Option<Option<serde_json::Value>> {
        let start = self.at;
        self.value(1)?;
        Some(serde_json::from_str(&self.text[start..self.at]).ok())
    }

    fn object(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_NESTING {
            return None;
        }
        self.members(b'{', b'}', |scan| {
            scan.string()?;
            scan.colon()?;
            scan.value(depth)
        })
    }

    fn array(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_NESTING {
            return None;
        }
        self.members(b'[', b']', |scan| scan.value(depth))
    }

    /// Past the opening bracket: skips whitespace, then `close` if it comes (an empty container).
    fn closes(&mut self, close: u8) -> bool {
        self.skip_whitespace();
        let empty = self.peek() == Some(close);
        if empty {
            self.at += 1;
        }
        empty
    }

    /// A string without escapes, as its text.
    fn plain_string(&mut self) -> Option<&'a str> {
        let start = self.at + 1;
        if self.string()? {
            return None;
        }
        self.text.get(start..self.at - 1)
    }

    /// Moves past the string opening here; `Some(true)` when it has escapes. `None` at a control
    /// character, a bad escape or the end of the text.
    fn string(&mut self) -> Option<bool> {
        self.expect(b'"')?;
        let mut escaped = false;
        while let Some(block) = self.bytes.get(self.at..self.at + BLOCK) {
            let (start, mut flagged) = (self.at, escape_mask(block.try_into().expect("a block")));
            self.at += BLOCK;
            while flagged != 0 {
                let at = start + flagged.trailing_zeros() as usize;
                match self.bytes[at] {
                    b'"' => {
                        self.at = at + 1;
                        return Some(escaped);
                    }
                    b'\\' => escaped = true,
                    _ => return None,
                }
                let end = at + self.escape_length(at)?;
                if end >= self.at {
                    self.at = end;
                    break;
                }
                flagged &= !0 << (end - start);
            }
        }
        self.string_tail(escaped)
    }

    /// The rest of a string that ends within a block of the end of the text. Kept apart from
    /// `string`'s loop, whose blocks are whole: one loop for both cost the check about 5 %.
    fn string_tail(&mut self, mut escaped: bool) -> Option<bool> {
        loop {
            self.at += first_to_escape(&self.bytes[self.at..])?;
            match self.bytes[self.at] {
                b'"' => {
                    self.at += 1;
                    return Some(escaped);
                }
                b'\\' => {
                    escaped = true;
                    self.at += self.escape_length(self.at)?;
                }
                _ => return None,
            }
        }
    }

    /// The length of the escape at `at` (its backslash included).
    fn escape_length(&self, at: usize) -> Option<usize> {
        Some(match *self.bytes.get(at + 1)? {
            b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => 2,
            b'u' if self.bytes.get(at + 2..at + 6)?.iter().all(u8::is_ascii_hexdigit) => 6,
            _ => return None,
        })
    }

    /// A number in JSON's grammar, as its text.
    fn number(&mut self) -> Option<&'a str> {
        let start = self.at;
        if self.peek() == Some(b'-') {
            self.at += 1;
        }
        match self.peek()? {
            b'0' if self.bytes.get(self.at + 1).is_some_and(u8::is_ascii_digit) => return None,
            b'0' => self.at += 1,
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if self.peek() == Some(b'.') {
            self.at += 1;
            self.some_digits()?;
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.at += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.at += 1;
            }
            self.some_digits()?;
        }
        self.text.get(start..self.at)
    }

    fn some_digits(&mut self) -> Option<()> {
        let start = self.at;
        self.digits();
        (self.at > start).then_some(())
    }

    fn digits(&mut self) {
        while self.peek().is_some_and(|byte| byte.is_ascii_digit()) {
            self.at += 1;
        }
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let found = self.bytes.get(self.at..self.at + word.len())? == word;
        found.then(|| self.at += word.len())
    }

    fn expect(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.at += 1)
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    /// Skips whitespace here, leaving it out of the compact text.
    #[inline]
    fn skip_whitespace(&mut self) {
        if self.peek().is_some_and(is_whitespace) {
            self.drop_whitespace();
        }
    }

    #[inline(never)]
    fn drop_whitespace(&mut self) {
        let start = self.at;
        while self.peek().is_some_and(is_whitespace) {
            self.at += 1;
        }
        if self.at > start {
            let kept = self.compact.get_or_insert_with(|| Vec::with_capacity(self.bytes.len()));
            kept.extend_from_slice(&self.bytes[self.kept_from..start]);
            self.kept_from = self.at;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WRITTEN: &str = r#"{"retryId":"c-1","turn":1,"step":2,"provider":"mock","mode":"normal","policyKey":"[\"normal\",2,[\"RATE_LIMIT\",\"SERVER\"],500,10000,0]","retry":1,"maxRetries":2,"delayMs":512.5,"failure":{"message":"HTTP 503: Service Unavailable ☁","code":"RATE_LIMIT","status":429}}"#;

    #[test]
    fn records_as_plugins_write_them_are_read_in_one_pass() {
        let (picked, compact) = read(WRITTEN).expect("a compact record");
        assert_eq!(compact, WRITTEN);
        assert_eq!(picked.retry_id.as_deref(), Some("c-1"));
        assert_eq!(picked.retry, Some(serde_json::json!(1)));
        assert_eq!(picked.delay_ms, Some("512.5"));
        let pretty =
            serde_json::to_string_pretty(&serde_json::from_str::<serde_json::Value>(WRITTEN).unwrap()).unwrap();
        let (_, compact) = read(&format!(" \r\n{pretty}\n")).expect("an indented record");
        assert_eq!(compact, crate::js::minify(&pretty));
    }

    #[test]
    fn escapes_anywhere_in_a_block_are_read_in_one_pass() {
        for pad in 0..2 * BLOCK {
            let value = format!(r#"{}\"\\\"\u00e9\\\\\"x\/\n"#, "a".repeat(pad));
            let inner = format!(r#"{{"retryId":"c","policyKey":"{value}","retry":1,"delayMs":5}}"#);
            let last = format!(r#"{{"retryId":"c","retry":1,"delayMs":5,"policyKey":"{value}"}}"#);
            for record in [inner, last] {
                let (picked, compact) = read(&record).unwrap_or_else(|| panic!("read in one pass: {record}"));
                assert_eq!((picked.retry_id.as_deref(), compact.as_str()), (Some("c"), record.as_str()));
                assert!(read(&record[..record.len() - 2]).is_none(), "a string the text ends in: {record}");
            }
        }
    }

    #[test]
    fn what_only_serde_json_may_judge_is_left_to_it() {
        let deep = format!(r#"{{"x":{}1{}}}"#, "[".repeat(MAX_NESTING), "]".repeat(MAX_NESTING));
        for text in [
            r#"{"re\u0074ry":1}"#,
            r#"{"retryId":"c\n"}"#,
            r#"{"retry":1,"retry":2}"#,
            r#"{"retry":"1"}"#,
            r#"{"delayMs":null}"#,
            r#"{"retry":1e400}"#,
            deep.as_str(),
            "{} x",
            "",
        ] {
            assert!(read(text).is_none(), "{text}");
        }
        assert!(read(&deep.replacen('[', "", 1).replacen(']', "", 1)).is_some());
    }
}
