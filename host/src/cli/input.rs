//! Reading what the user types or pipes in, bounded: a prompt or a chat line longer than a log
//! line may hold is refused while it is read, without holding more of it than the limit.

use std::io::{self, BufRead, Read};

use dsh_session::reader::{read_bounded_line, MAX_LINE_BYTES};

/// One line of input.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    Text(String),
    /// Longer than [`MAX_LINE_BYTES`]: its length, none of it kept.
    TooLong(u64),
    /// Not UTF-8: its length.
    NotUtf8(u64),
}

/// Reads one line (without its line ending), keeping at most [`MAX_LINE_BYTES`] of it; `None`
/// at the end of the input.
pub fn read_line(input: &mut impl BufRead) -> io::Result<Option<Line>> {
    let mut kept = Vec::new();
    let read = read_bounded_line(input, &mut kept, MAX_LINE_BYTES + 1)?;
    if read == 0 {
        return Ok(None);
    }
    while matches!(kept.last(), Some(b'\n' | b'\r')) {
        kept.pop();
    }
    Ok(Some(classify(kept, read as u64)))
}

/// All of `input` as one prompt, read up to one byte past [`MAX_LINE_BYTES`].
pub fn read_all(input: impl Read) -> io::Result<Line> {
    let mut kept = Vec::new();
    input.take(MAX_LINE_BYTES as u64 + 1).read_to_end(&mut kept)?;
    let read = kept.len() as u64;
    Ok(classify(kept, read))
}

fn classify(kept: Vec<u8>, read: u64) -> Line {
    if kept.len() > MAX_LINE_BYTES {
        return Line::TooLong(read);
    }
    match String::from_utf8(kept) {
        Ok(text) => Line::Text(text),
        Err(_) => Line::NotUtf8(read),
    }
}

impl Line {
    /// The text, or why it was not taken (`what` names the input: "the prompt on stdin").
    pub fn text(self, what: &str) -> Result<String, String> {
        match self {
            Line::Text(text) => Ok(text),
            Line::TooLong(_) => Err(format!(
                "{what} is longer than the {} MiB ({MAX_LINE_BYTES} bytes) a session log line may hold; nothing was sent or written",
                MAX_LINE_BYTES >> 20
            )),
            Line::NotUtf8(bytes) => Err(format!("{what} ({bytes} bytes) is not UTF-8 text; nothing was sent or written")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_of_exactly_the_limit_is_kept_and_one_byte_more_is_refused() {
        let exact = format!("{}\nnext\n", "a".repeat(MAX_LINE_BYTES));
        let mut input = io::Cursor::new(exact.into_bytes());
        assert!(matches!(read_line(&mut input).unwrap(), Some(Line::Text(text)) if text.len() == MAX_LINE_BYTES));
        assert_eq!(read_line(&mut input).unwrap(), Some(Line::Text("next".into())));
        let over = format!("{}\nnext\n", "a".repeat(MAX_LINE_BYTES + 1));
        let mut input = io::Cursor::new(over.into_bytes());
        assert_eq!(read_line(&mut input).unwrap(), Some(Line::TooLong(MAX_LINE_BYTES as u64 + 2)));
        assert_eq!(read_line(&mut input).unwrap(), Some(Line::Text("next".into())), "the next line is intact");
        assert_eq!(read_line(&mut input).unwrap(), None);
    }

    #[test]
    fn a_line_that_is_not_utf8_is_reported_and_the_next_one_read() {
        let mut input = io::Cursor::new(b"caf\xe9\r\nok\n".to_vec());
        assert_eq!(read_line(&mut input).unwrap(), Some(Line::NotUtf8(6)));
        assert_eq!(read_line(&mut input).unwrap(), Some(Line::Text("ok".into())));
    }

    #[test]
    fn a_prompt_one_byte_over_the_limit_is_refused() {
        let exact = vec![b'B'; MAX_LINE_BYTES];
        assert!(matches!(read_all(&exact[..]).unwrap(), Line::Text(_)));
        let over = vec![b'B'; MAX_LINE_BYTES + 1];
        assert!(matches!(read_all(&over[..]).unwrap(), Line::TooLong(_)));
    }
}
