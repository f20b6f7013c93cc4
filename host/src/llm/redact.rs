//! Keeping secrets out of everything dsh writes or shows: the API key's value and the credentials
//! of a `baseUrl` are replaced by `[redacted]` in every failure (message, code, request id) and in
//! the streamed text, before any of it is logged or printed — even when a provider echoes them
//! back. Streamed text is redacted as it arrives: a secret split across two chunks is still
//! caught, because the tail that could be the start of one is held back until the next chunk.

use std::borrow::Cow;

use abi_stable::std_types::{ROption, RString};
use dsh_abi::Failure;

pub const REDACTED: &str = "[redacted]";

/// The secret values of one request. Values shorter than 4 bytes are not treated as secrets (they
/// would redact ordinary text).
#[derive(Debug, Clone, Default)]
pub struct Secrets {
    values: Vec<String>,
}

impl Secrets {
    pub fn add(&mut self, value: &str) {
        if value.len() >= 4 && !self.values.iter().any(|known| known == value) {
            self.values.push(value.to_owned());
        }
    }

    /// The credentials of a URL (`https://user:secret@host/…`), as secrets.
    pub fn add_url_credentials(&mut self, url: &reqwest::Url) {
        let user = url.username();
        self.add(user);
        if let Some(password) = url.password() {
            self.add(password);
        }
        for encoded in [user, url.password().unwrap_or_default()] {
            if let Ok(decoded) = urlencoding_decode(encoded) {
                self.add(&decoded);
            }
        }
    }

    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut text = Cow::Borrowed(text);
        for secret in &self.values {
            if text.contains(secret.as_str()) {
                text = Cow::Owned(text.replace(secret.as_str(), REDACTED));
            }
        }
        text
    }

    /// The failure with every secret taken out of its message, code and request id.
    pub fn redact_failure(&self, mut failure: Failure) -> Failure {
        failure.message = RString::from(self.redact(&failure.message).into_owned());
        failure.code = RString::from(self.redact(&failure.code).into_owned());
        if let ROption::RSome(id) = &failure.request_id {
            failure.request_id = ROption::RSome(RString::from(self.redact(id).into_owned()));
        }
        failure
    }

    fn longest(&self) -> usize {
        self.values.iter().map(String::len).max().unwrap_or(0)
    }
}

/// Percent-decoding of a URL's user or password.
fn urlencoding_decode(text: &str) -> Result<String, std::string::FromUtf8Error> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        match (bytes[index], bytes.get(index + 1..index + 3)) {
            (b'%', Some(hex)) => match std::str::from_utf8(hex).ok().and_then(|hex| u8::from_str_radix(hex, 16).ok()) {
                Some(byte) => {
                    out.push(byte);
                    index += 3;
                    continue;
                }
                None => out.push(b'%'),
            },
            (byte, _) => out.push(byte),
        }
        index += 1;
    }
    String::from_utf8(out)
}

/// Redacts a stream of text deltas.
#[derive(Debug)]
pub struct StreamRedactor {
    secrets: Secrets,
    held: String,
}

impl StreamRedactor {
    pub fn new(secrets: Secrets) -> Self {
        StreamRedactor { secrets, held: String::new() }
    }

    /// Takes a delta; returns the text that is safe to pass on now.
    pub fn feed(&mut self, delta: &str) -> String {
        let keep = self.secrets.longest().saturating_sub(1);
        self.held.push_str(delta);
        if keep == 0 {
            return std::mem::take(&mut self.held);
        }
        let redacted = self.secrets.redact(&self.held).into_owned();
        let mut cut = redacted.len().saturating_sub(keep);
        while !redacted.is_char_boundary(cut) {
            cut -= 1;
        }
        self.held = redacted[cut..].to_owned();
        redacted[..cut].to_owned()
    }

    /// The text still held back, redacted.
    pub fn finish(&mut self) -> String {
        let held = std::mem::take(&mut self.held);
        self.secrets.redact(&held).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn secrets(values: &[&str]) -> Secrets {
        let mut secrets = Secrets::default();
        for value in values {
            secrets.add(value);
        }
        secrets
    }

    #[test]
    fn a_failure_loses_its_secrets_everywhere() {
        let mut failure = Failure::new("AUTH sk-123456", "HTTP 401: invalid key sk-123456");
        failure.request_id = ROption::RSome("req-sk-123456".into());
        let redacted = secrets(&["sk-123456"]).redact_failure(failure);
        assert_eq!(redacted.message.as_str(), "HTTP 401: invalid key [redacted]");
        assert_eq!(redacted.code.as_str(), "AUTH [redacted]");
        assert_eq!(redacted.request_id.as_ref().into_option().map(RString::as_str), Some("req-[redacted]"));
    }

    #[test]
    fn url_credentials_are_secrets_encoded_or_not() {
        let mut found = Secrets::default();
        found.add_url_credentials(&reqwest::Url::parse("https://team:p%40ss-word@relay.example/v1").unwrap());
        assert_eq!(found.redact("team p@ss-word p%40ss-word"), "[redacted] [redacted] [redacted]");
    }

    #[test]
    fn short_values_are_not_secrets() {
        assert_eq!(secrets(&["ab"]).redact("abc"), "abc");
    }

    proptest! {
        #[test]
        fn a_secret_split_anywhere_across_deltas_never_passes(
            before in "[a-z ]{0,12}", after in "[a-z ]{0,12}", cuts in prop::collection::vec(0usize..40, 0..5),
        ) {
            let secret = "sk-SECRET-42";
            let text = format!("{before}{secret}{after}{secret}");
            let mut positions: Vec<usize> = cuts.into_iter().map(|cut| cut.min(text.len())).collect();
            positions.sort();
            let mut redactor = StreamRedactor::new(secrets(&[secret]));
            let mut passed = String::new();
            let mut start = 0;
            for end in positions.into_iter().chain([text.len()]) {
                passed.push_str(&redactor.feed(&text[start..end]));
                start = end;
            }
            passed.push_str(&redactor.finish());
            prop_assert!(!passed.contains(secret));
            prop_assert_eq!(passed, format!("{before}{REDACTED}{after}{REDACTED}"));
        }
    }
}
