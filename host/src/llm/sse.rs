//! A Server-Sent Events decoder for streamed chat completions, bounded in memory.
//!
//! Bytes arrive in arbitrary pieces: a `data:` line, a CRLF pair or a UTF-8 sequence may be split
//! anywhere. Lines end with LF, CRLF or CR; `:` starts a comment; consecutive `data:` lines of one
//! event are joined with `\n`; an empty line dispatches the event. A line longer than the limit
//! is an error rather than unbounded growth, and a line that is not UTF-8 is an error.

/// Why the stream cannot be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    #[error("an SSE line exceeds {0} bytes")]
    LineTooLong(usize),
    #[error("an SSE line is not valid UTF-8")]
    NotUtf8,
}

/// One decoded item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SseItem {
    /// An event's data (its `data:` lines joined).
    Data(String),
    /// A comment line (`: keep-alive`), which still proves the peer is alive.
    Comment,
}

/// The default longest line and event: 8 MiB.
pub const DEFAULT_LIMIT: usize = 8 * 1024 * 1024;

#[derive(Debug)]
pub struct SseDecoder {
    line: Vec<u8>,
    data: String,
    has_data: bool,
    /// The previous byte was a CR, so an LF right after it ends nothing new.
    after_cr: bool,
    limit: usize,
}

impl Default for SseDecoder {
    fn default() -> Self {
        SseDecoder::with_limit(DEFAULT_LIMIT)
    }
}

impl SseDecoder {
    pub fn with_limit(limit: usize) -> Self {
        SseDecoder { line: Vec::new(), data: String::new(), has_data: false, after_cr: false, limit }
    }

    /// Feeds bytes and pushes every complete item to `out`.
    pub fn feed(&mut self, bytes: &[u8], out: &mut Vec<SseItem>) -> Result<(), SseError> {
        for &byte in bytes {
            match byte {
                b'\n' if self.after_cr => self.after_cr = false,
                b'\n' | b'\r' => {
                    self.after_cr = byte == b'\r';
                    self.end_line(out)?;
                }
                _ => {
                    self.after_cr = false;
                    if self.line.len() >= self.limit {
                        return Err(SseError::LineTooLong(self.limit));
                    }
                    self.line.push(byte);
                }
            }
        }
        Ok(())
    }

    fn end_line(&mut self, out: &mut Vec<SseItem>) -> Result<(), SseError> {
        let line = std::str::from_utf8(&self.line).map_err(|_| SseError::NotUtf8)?;
        if line.is_empty() {
            if self.has_data {
                out.push(SseItem::Data(std::mem::take(&mut self.data)));
                self.has_data = false;
            }
        } else if line.starts_with(':') {
            out.push(SseItem::Comment);
        } else {
            let (field, value) = match line.split_once(':') {
                Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
                None => (line, ""),
            };
            if field == "data" {
                if self.has_data {
                    self.data.push('\n');
                }
                if self.data.len() + value.len() > self.limit {
                    return Err(SseError::LineTooLong(self.limit));
                }
                self.data.push_str(value);
                self.has_data = true;
            }
        }
        self.line.clear();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn decode(pieces: &[&[u8]]) -> Result<Vec<SseItem>, SseError> {
        let mut decoder = SseDecoder::default();
        let mut out = Vec::new();
        for piece in pieces {
            decoder.feed(piece, &mut out)?;
        }
        Ok(out)
    }

    fn data(text: &str) -> SseItem {
        SseItem::Data(text.to_owned())
    }

    #[test]
    fn events_comments_and_done() {
        let items = decode(&[b": keep-alive\n\ndata: {\"a\":1}\n\ndata: [DONE]\n\n"]).unwrap();
        assert_eq!(items, [SseItem::Comment, data("{\"a\":1}"), data("[DONE]")]);
    }

    #[test]
    fn crlf_cr_and_multi_line_data() {
        assert_eq!(decode(&[b"data: a\r\ndata: b\r\n\r\n", b"data:c\r\r"]).unwrap(), [data("a\nb"), data("c")]);
    }

    #[test]
    fn a_split_crlf_does_not_make_an_extra_line() {
        assert_eq!(decode(&[b"data: x\r", b"\n\r", b"\n"]).unwrap(), [data("x")]);
    }

    #[test]
    fn utf8_split_across_reads_is_reassembled() {
        let text = "data: h\u{e9}llo \u{1F600}\n\n".as_bytes();
        let pieces: Vec<&[u8]> = text.chunks(1).collect();
        assert_eq!(decode(&pieces).unwrap(), [data("h\u{e9}llo \u{1F600}")]);
    }

    #[test]
    fn invalid_utf8_and_endless_lines_are_errors() {
        assert_eq!(decode(&[b"data: \xff\xfe\n\n"]), Err(SseError::NotUtf8));
        let mut decoder = SseDecoder::with_limit(16);
        let mut out = Vec::new();
        assert_eq!(decoder.feed(&[b'a'; 64], &mut out), Err(SseError::LineTooLong(16)));
    }

    #[test]
    fn other_fields_are_ignored() {
        assert_eq!(decode(&[b"event: message\nid: 4\nretry: 10\ndata: x\n\n"]).unwrap(), [data("x")]);
    }

    proptest! {
        #[test]
        fn any_split_of_a_stream_decodes_the_same(split in prop::collection::vec(0usize..60, 0..8)) {
            let stream = b"data: {\"choices\":[{\"delta\":{\"content\":\"h\xc3\xa9\"}}]}\r\n\r\n: c\n\ndata: [DONE]\n\n";
            let mut cuts: Vec<usize> = split.into_iter().map(|cut| cut.min(stream.len())).collect();
            cuts.sort();
            let mut pieces = Vec::new();
            let mut start = 0;
            for cut in cuts {
                pieces.push(&stream[start..cut]);
                start = cut;
            }
            pieces.push(&stream[start..]);
            prop_assert_eq!(decode(&pieces).unwrap(), decode(&[stream]).unwrap());
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
            let _ = decode(&[&bytes]);
        }
    }
}
