//! Text on its way to a terminal or a pipe a person reads: every secret the process knows taken
//! out ([`dsh_session::redact`]), and control characters — escape sequences, carriage returns, bells,
//! an OSC 52 clipboard write — made visible symbols instead of acting on the terminal. Text from
//! providers, MCP servers, logs and databases reaches the user only through here (the `out!` and
//! `say!` macros, the log formatter and the live view); exact output (`session export`, JSON
//! documents) does not pass through it.

use std::borrow::Cow;

/// `text` with its control characters (but newlines and tabs) made visible.
pub(crate) fn neutralised(text: &str) -> Cow<'_, str> {
    let acts = |c: char| c.is_control() && c != '\n' && c != '\t';
    if !text.chars().any(acts) {
        return Cow::Borrowed(text);
    }
    text.chars()
        .map(|c| match c {
            c if !acts(c) => c,
            '\u{7f}' => '\u{2421}',
            c if (c as u32) < 0x20 => char::from_u32(0x2400 + c as u32).unwrap_or('\u{FFFD}'),
            _ => '\u{FFFD}',
        })
        .collect()
}

/// `text` as dsh shows it: secrets out, control characters visible.
pub(crate) fn shown(text: &str) -> String {
    neutralised(&dsh_session::redact::text(text)).into_owned()
}

/// The plural ending of a noun counted `count` times: `1 provider`, `2 providers`.
pub(crate) fn plural<N: PartialEq + From<u8>>(count: N) -> &'static str {
    if count == N::from(1) {
        ""
    } else {
        "s"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_and_clipboard_writes_are_shown_not_done() {
        let osc52 = "ok\u{1b}]52;c;ZWNobyBoaQ==\u{7}\r\u{1b}[2Jdone\n\tnext";
        assert_eq!(shown(osc52), "ok\u{241b}]52;c;ZWNobyBoaQ==\u{2407}\u{240d}\u{241b}[2Jdone\n\tnext");
        assert!(matches!(neutralised("plain\ttext\n"), Cow::Borrowed(_)));
        assert_eq!(neutralised("csi \u{9b}31m"), "csi \u{FFFD}31m");
    }
}
