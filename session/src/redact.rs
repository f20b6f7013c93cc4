//! Keeping secrets out of everything dsh writes or shows. This module is the one place that
//! knows what a secret is and how it is taken out of text:
//!
//! - the process keeps one registry of every secret it has learnt ([`learn`], [`learn_url`],
//!   [`learn_header`]): provider API keys and `baseUrl` credentials, MCP `tokenEnv` values and
//!   credential headers, counter-store and session-store passwords;
//! - every log event passes [`Secrets::redact_json`] before it is written (so `--json`, `session
//!   show` and the next request to the model, which are read from the log, never hold one), and
//!   every line dsh prints passes [`Secrets::redact`];
//! - a URL shown in a message goes through [`url`], which drops credentials in any form — a
//!   scheme in capitals, a password holding an unescaped `@`, a `?password=` parameter.
//!
//! A secret of [`WHOLE_VALUE_BELOW_BYTES`] or more is replaced wherever it appears; a shorter one
//! only where it stands as a whole value (no letter or digit right before or after it), so a short
//! token does not mangle a host name that happens to contain it. Values shorter than
//! [`MIN_SECRET_BYTES`] are not treated as secrets: they would redact ordinary words.

use std::borrow::Cow;
use std::sync::{Arc, RwLock};

use abi_stable::std_types::{ROption, RString};
use dsh_abi::Failure;
use memchr::memmem;
use serde_json::Value;

pub const REDACTED: &str = "[redacted]";

/// Shorter values are not secrets.
pub const MIN_SECRET_BYTES: usize = 4;

/// Secrets shorter than this are matched only as whole values.
pub const WHOLE_VALUE_BELOW_BYTES: usize = 16;

/// One secret and the fast searcher for it.
#[derive(Clone)]
struct Secret {
    finder: memmem::Finder<'static>,
    /// Its form inside a JSON string, when escaping changes it.
    escaped: Option<memmem::Finder<'static>>,
    whole_value: bool,
}

impl Secret {
    fn new(value: &str) -> Secret {
        let quoted = serde_json::to_string(value).expect("strings serialise");
        let escaped = &quoted[1..quoted.len() - 1];
        Secret {
            finder: memmem::Finder::new(value.as_bytes()).into_owned(),
            escaped: (escaped != value).then(|| memmem::Finder::new(escaped.as_bytes()).into_owned()),
            whole_value: value.len() < WHOLE_VALUE_BELOW_BYTES,
        }
    }

    fn text(&self) -> &str {
        std::str::from_utf8(self.finder.needle()).expect("secrets are text")
    }

    /// The byte ranges of `text` this secret takes, left to right, never overlapping.
    fn matches(&self, text: &str) -> Vec<(usize, usize)> {
        let len = self.finder.needle().len();
        let bytes = text.as_bytes();
        let word = |at: Option<&u8>| at.is_some_and(|byte| byte.is_ascii_alphanumeric());
        let mut found = Vec::new();
        let mut from = 0;
        while let Some(at) = self.finder.find(&bytes[from..]).map(|at| at + from) {
            let end = at + len;
            let bounded =
                !self.whole_value || (!word(at.checked_sub(1).and_then(|i| bytes.get(i))) && !word(bytes.get(end)));
            if bounded {
                found.push((at, end));
                from = end;
            } else {
                from = at + 1;
            }
        }
        found
    }

    fn may_occur_in(&self, text: &[u8]) -> bool {
        self.finder.find(text).is_some() || self.escaped.as_ref().is_some_and(|escaped| escaped.find(text).is_some())
    }
}

/// A set of secrets, longest first (a secret inside a longer one is taken with it).
#[derive(Clone, Default)]
pub struct Secrets {
    values: Vec<Secret>,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secrets({} values)", self.values.len())
    }
}

impl Secrets {
    pub fn add(&mut self, value: &str) {
        if value.len() < MIN_SECRET_BYTES || self.values.iter().any(|known| known.text() == value) {
            return;
        }
        let at = self.values.partition_point(|known| known.text().len() >= value.len());
        self.values.insert(at, Secret::new(value));
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The credentials of a URL: its password, or the user name when there is no password (a
    /// key given as the user), each as written and percent-decoded; and the values of its
    /// credential parameters (`?password=…`).
    pub fn add_url(&mut self, url: &str) {
        let Some((_, rest)) = url.split_once("://") else { return };
        if let Some(credential) = url_credential(url) {
            self.add(credential);
            self.add(&percent_decoded(credential));
        }
        for (_, value) in credential_parameters(rest) {
            self.add(value);
            self.add(&percent_decoded(value));
        }
    }

    /// A header's value when its name says it carries a credential ([`is_credential_header`]);
    /// for `Authorization: Bearer TOKEN`, the token as well.
    pub fn add_header(&mut self, name: &str, value: &str) {
        if !is_credential_header(name) {
            return;
        }
        self.add(value);
        if let Some((_, token)) = value.split_once(' ') {
            self.add(token.trim());
        }
    }

    pub fn extend(&mut self, other: &Secrets) {
        for secret in &other.values {
            self.add(secret.text());
        }
    }

    /// `text` with every secret replaced by [`REDACTED`].
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut text = Cow::Borrowed(text);
        for secret in &self.values {
            let found = secret.matches(&text);
            if found.is_empty() {
                continue;
            }
            let mut out = String::with_capacity(text.len());
            let mut last = 0;
            for (start, end) in found {
                out.push_str(&text[last..start]);
                out.push_str(REDACTED);
                last = end;
            }
            out.push_str(&text[last..]);
            text = Cow::Owned(out);
        }
        text
    }

    /// One line of JSON with every secret taken out of its strings and keys; the line itself
    /// when it holds none (the usual case: one search per secret, no parsing).
    pub fn redact_json<'a>(&self, line: &'a str) -> Cow<'a, str> {
        if !self.values.iter().any(|secret| secret.may_occur_in(line.as_bytes())) {
            return Cow::Borrowed(line);
        }
        let Ok(mut value) = serde_json::from_str::<Value>(line) else { return self.redact(line) };
        if !self.redact_value(&mut value) {
            return Cow::Borrowed(line);
        }
        Cow::Owned(dsh_abi::js::to_string(&value))
    }

    /// Redacts every string and key of `value` in place; whether anything changed.
    pub fn redact_value(&self, value: &mut Value) -> bool {
        match value {
            Value::String(text) => match self.redact(text) {
                Cow::Owned(redacted) => {
                    *text = redacted;
                    true
                }
                Cow::Borrowed(_) => false,
            },
            Value::Array(items) => items.iter_mut().fold(false, |changed, item| self.redact_value(item) | changed),
            Value::Object(map) => {
                let mut changed = false;
                let entries = std::mem::take(map);
                for (key, mut item) in entries {
                    changed |= self.redact_value(&mut item);
                    let key = match self.redact(&key) {
                        Cow::Owned(redacted) => {
                            changed = true;
                            redacted
                        }
                        Cow::Borrowed(_) => key,
                    };
                    map.insert(key, item);
                }
                changed
            }
            _ => false,
        }
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
        self.values.first().map_or(0, |secret| secret.finder.needle().len())
    }
}

/// Whether a header of this name carries a credential: `Authorization`, a cookie, or a name
/// with `key`, `token`, `secret`, `auth`, `password`, `signature` or `credential` in it.
pub fn is_credential_header(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    ["auth", "key", "token", "secret", "cookie", "password", "signature", "credential"]
        .iter()
        .any(|part| name.contains(part))
}

/// The secrets this process has learnt.
static KNOWN: RwLock<Option<Arc<Secrets>>> = RwLock::new(None);

/// Every secret the process has learnt so far.
pub fn known() -> Arc<Secrets> {
    KNOWN.read().ok().and_then(|known| known.clone()).unwrap_or_default()
}

fn learn_with(add: impl FnOnce(&mut Secrets)) {
    let Ok(mut known) = KNOWN.write() else { return };
    let mut grown = known.as_deref().cloned().unwrap_or_default();
    let before = grown.values.len();
    add(&mut grown);
    if grown.values.len() != before {
        *known = Some(Arc::new(grown));
    }
}

/// Remembers `value` as a secret of this process.
pub fn learn(value: &str) {
    learn_with(|known| known.add(value));
}

/// Remembers the credentials of `url` ([`Secrets::add_url`]).
pub fn learn_url(url: &str) {
    learn_with(|known| known.add_url(url));
}

/// Remembers a credential header's value ([`Secrets::add_header`]).
pub fn learn_header(name: &str, value: &str) {
    learn_with(|known| known.add_header(name, value));
}

/// Remembers every credential written inline in a row's `config` ([`inline_credentials`]).
pub fn learn_inline(config: &Value) {
    let found = inline_credentials(config);
    if found.is_empty() {
        return;
    }
    learn_with(|known| {
        for credential in &found {
            known.add(&credential.value);
            known.add(&percent_decoded(&credential.value));
        }
    });
}

/// `text` with every secret the process knows taken out.
pub fn text(text: &str) -> Cow<'_, str> {
    match KNOWN.read().ok().and_then(|known| known.clone()) {
        Some(known) => Cow::Owned(known.redact(text).into_owned()),
        None => Cow::Borrowed(text),
    }
}

/// The names of URL parameters (or `key=value` words) whose values are credentials.
fn is_credential_parameter(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    ["pass", "pwd", "token", "secret", "auth"].iter().any(|part| name.contains(part))
        || matches!(name.as_str(), "key" | "apikey" | "api_key" | "api-key")
}

/// The credential parameters of a URL's rest or a `key=value …` string: `(name, value)`.
fn credential_parameters(text: &str) -> Vec<(&str, &str)> {
    text.split(['?', '&', ' ', ';'])
        .filter_map(|pair| pair.split_once('='))
        .filter(|(name, value)| is_credential_parameter(name) && !value.is_empty())
        .collect()
}

/// A URL (or a PostgreSQL `key=value` string) as it may be shown: its user information and
/// every credential parameter replaced by [`REDACTED`], whatever its scheme's case and however
/// malformed it is. Everything up to the last `@` is taken for user information, so a password
/// holding an unescaped `@` is not shown in part.
pub fn url(text: &str) -> String {
    let shown = match text.split_once("://") {
        Some((scheme, rest)) => match rest.rfind('@') {
            Some(at) => format!("{scheme}://{REDACTED}{}", &rest[at..]),
            None => text.to_owned(),
        },
        None => text.to_owned(),
    };
    parameters_redacted(&shown)
}

/// `text` with the value of every credential parameter ([`credential_parameters`]) replaced by
/// [`REDACTED`].
fn parameters_redacted(text: &str) -> String {
    let mut redacted = text.to_owned();
    for (name, value) in credential_parameters(text) {
        redacted = redacted.replace(&format!("{name}={value}"), &format!("{name}={REDACTED}"));
    }
    redacted
}

/// Percent-decoding of a URL's user or password (an invalid escape is kept as written).
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        let hex = bytes.get(index + 1..index + 3).and_then(|hex| std::str::from_utf8(hex).ok());
        match (bytes[index], hex.and_then(|hex| u8::from_str_radix(hex, 16).ok())) {
            (b'%', Some(byte)) => {
                out.push(byte);
                index += 3;
            }
            (byte, _) => {
                out.push(byte);
                index += 1;
            }
        }
    }
    String::from_utf8(out).unwrap_or_else(|_| text.to_owned())
}

/// A credential written inline in a row's config: where (a key path), its value, and what holds
/// it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InlineCredential {
    pub path: String,
    pub value: String,
    pub holder: Holder,
}

/// What holds an inline credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holder {
    /// A URL's user information.
    Url,
    /// The value of this header.
    Header(String),
    /// The value of this variable of a server's environment.
    Env(String),
}

/// The credential a URL holds inline, in its authority: its password, or its user name when it has
/// no password.
pub fn url_credential(url: &str) -> Option<&str> {
    let (scheme, rest) = url.split_once("://")?;
    if scheme.is_empty() || !scheme.bytes().all(|byte| byte.is_ascii_alphanumeric() || b"+-.".contains(&byte)) {
        return None;
    }
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let userinfo = &authority[..authority.rfind('@')?];
    let credential = userinfo.split_once(':').map_or(userinfo, |(_, password)| password);
    (!credential.is_empty()).then_some(credential)
}

/// Whether an environment variable of this name holds a secret by its name.
fn is_secret_name(name: &str) -> bool {
    let name = name.to_ascii_uppercase();
    ["TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "AUTH", "CREDENTIAL"].iter().any(|part| name.contains(part))
}

/// Every credential written inline in `config`: a URL's user information or credential query
/// parameter (`?password=`, `?api_key=`) wherever a URL is, the value of a credential header
/// under `headers` ([`is_credential_header`]), and a server `env` value whose variable's name
/// says it is a secret.
pub fn inline_credentials(config: &Value) -> Vec<InlineCredential> {
    let mut found = Vec::new();
    walk_credentials(&mut config.clone(), "", &mut found);
    found
}

/// Replaces every credential written inline in `config` ([`inline_credentials`]) by
/// [`REDACTED`] where it stands (a URL keeps its other parts); returns what was taken out.
pub fn take_inline_credentials(config: &mut Value) -> Vec<InlineCredential> {
    let mut found = Vec::new();
    walk_credentials(config, "", &mut found);
    found
}

/// The credentials a URL holds inline: its user information's password (or user name when it
/// has no password), and its credential query parameters' values. Text that is no URL has none.
fn url_credentials(text: &str) -> Vec<&str> {
    let Some((_, rest)) = text.split_once("://") else { return Vec::new() };
    let query = rest.find('?').map_or("", |start| &rest[start..]);
    let parameters = credential_parameters(query).into_iter().map(|(_, value)| value);
    url_credential(text).into_iter().chain(parameters).collect()
}

/// `url` with every credential [`url_credentials`] finds replaced by [`REDACTED`].
fn without_url_credentials(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_owned() };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, after) = rest.split_at(authority_end);
    let authority = match authority.rfind('@') {
        Some(at) => match authority[..at].split_once(':') {
            Some((user, _)) => format!("{user}:{REDACTED}{}", &authority[at..]),
            None => format!("{REDACTED}{}", &authority[at..]),
        },
        None => authority.to_owned(),
    };
    format!("{scheme}://{authority}{}", parameters_redacted(after))
}

/// Notes (and takes out) the credentials of the string `value` at `path`, held by `holder`: all
/// of it when it is `secret` (a header's or variable's name says so), else a URL's own.
fn take_from_string(
    value: &mut Value,
    path: String,
    (holder, secret): (Holder, bool),
    found: &mut Vec<InlineCredential>,
) {
    let Value::String(text) = value else { return };
    if secret {
        found.push(InlineCredential { path, value: std::mem::replace(text, REDACTED.to_owned()), holder });
        return;
    }
    let credentials = url_credentials(text);
    if credentials.is_empty() {
        return;
    }
    found.extend(credentials.into_iter().map(|credential| InlineCredential {
        path: path.clone(),
        value: credential.to_owned(),
        holder: holder.clone(),
    }));
    *text = without_url_credentials(text);
}

fn walk_credentials(value: &mut Value, path: &str, found: &mut Vec<InlineCredential>) {
    let at = |key: &str| if path.is_empty() { key.to_owned() } else { format!("{path}.{key}") };
    match value {
        Value::String(_) => take_from_string(value, path.to_owned(), (Holder::Url, false), found),
        Value::Array(items) => {
            for (index, item) in items.iter_mut().enumerate() {
                walk_credentials(item, &format!("{path}[{index}]"), found);
            }
        }
        Value::Object(map) => {
            for (key, item) in map.iter_mut() {
                let holder: fn(&str) -> (Holder, bool) = match key.as_str() {
                    "headers" => |name| match is_credential_header(name) {
                        true => (Holder::Header(name.to_owned()), true),
                        false => (Holder::Url, false),
                    },
                    "env" => |name| (Holder::Env(name.to_owned()), is_secret_name(name)),
                    _ => {
                        walk_credentials(item, &at(key), found);
                        continue;
                    }
                };
                let Some(entries) = item.as_object_mut() else {
                    walk_credentials(item, &at(key), found);
                    continue;
                };
                for (name, entry) in entries.iter_mut() {
                    take_from_string(entry, format!("{}.{name}", at(key)), holder(name), found);
                }
            }
        }
        _ => {}
    }
}

/// Redacts a stream of text deltas: a secret split across two deltas is still caught, because
/// the tail that could be the start of one (or a short secret waiting to see what follows it)
/// is held back until the next delta.
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
        let keep = self.secrets.longest();
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
        let mut failure = Failure::new("AUTH sk-1234567890abcdef", "HTTP 401: invalid key sk-1234567890abcdef");
        failure.request_id = ROption::RSome("req-sk-1234567890abcdef".into());
        let redacted = secrets(&["sk-1234567890abcdef"]).redact_failure(failure);
        assert_eq!(redacted.message.as_str(), "HTTP 401: invalid key [redacted]");
        assert_eq!(redacted.code.as_str(), "AUTH [redacted]");
        assert_eq!(redacted.request_id.as_ref().into_option().map(RString::as_str), Some("req-[redacted]"));
    }

    #[test]
    fn url_credentials_are_secrets_encoded_or_not() {
        let mut found = Secrets::default();
        found.add_url("https://team:p%40ss-word@relay.example/v1");
        assert_eq!(found.redact("team p@ss-word p%40ss-word"), "team [redacted] [redacted]");
        let mut key_as_user = Secrets::default();
        key_as_user.add_url("https://sk-relay-key@relay.example/v1");
        assert_eq!(key_as_user.redact("bad key sk-relay-key"), "bad key [redacted]");
        let mut parameter = Secrets::default();
        parameter.add_url("redis+unix:///run/redis.sock?db=0&password=hunter22");
        assert_eq!(parameter.redact("auth hunter22 failed"), "auth [redacted] failed");
    }

    #[test]
    fn a_short_secret_is_matched_as_a_whole_value_not_inside_a_host() {
        let short = secrets(&["xample"]);
        assert_eq!(short.redact("https://mcp.example.com/mcp"), "https://mcp.example.com/mcp");
        assert_eq!(short.redact("Bearer xample, token=xample."), "Bearer [redacted], token=[redacted].");
        let long = secrets(&["tok-SECRET-0123456789"]);
        assert_eq!(long.redact("xtok-SECRET-0123456789x"), "x[redacted]x");
    }

    #[test]
    fn short_values_are_not_secrets() {
        assert_eq!(secrets(&["abc"]).redact("abc"), "abc");
    }

    #[test]
    fn urls_are_shown_without_credentials_in_any_form() {
        let cases = [
            ("REDIS://:PASS@h:1/0", "REDIS://[redacted]@h:1/0"),
            ("redis://user:p@ss@h:1", "redis://[redacted]@h:1"),
            ("redis://:pa/ss@h:1", "redis://[redacted]@h:1"),
            ("redis+unix:///tmp/r.sock?db=1&password=hunter2", "redis+unix:///tmp/r.sock?db=1&password=[redacted]"),
            (
                "postgres://dsh@127.0.0.1:5432/db?sslmode=disable",
                "postgres://[redacted]@127.0.0.1:5432/db?sslmode=disable",
            ),
            ("PostgreSQL://u:x@y@h/db", "PostgreSQL://[redacted]@h/db"),
            ("host=h user=u password=secret dbname=d", "host=h user=u password=[redacted] dbname=d"),
            ("redis://h:1/0", "redis://h:1/0"),
        ];
        for (given, shown) in cases {
            assert_eq!(url(given), shown, "{given}");
        }
    }

    #[test]
    fn inline_credentials_are_found_with_the_way_to_give_them_instead() {
        let config = serde_json::json!({
            "baseUrl": "https://sk-relay@relay.example/v1", "store": "REDIS://:PASS@h:1",
            "headers": {"X-Api-Key": "k-1", "X-Team": "blue"}, "env": {"GITHUB_TOKEN": "ghp", "ROOT": "/work"},
            "nested": [{"url": "https://u:p@mcp.example/mcp"}], "plain": "https://mcp.example/x@y",
        });
        let found: Vec<(String, String)> =
            inline_credentials(&config).into_iter().map(|found| (found.path, found.value)).collect();
        let expected = [
            ("baseUrl", "sk-relay"),
            ("store", "PASS"),
            ("headers.X-Api-Key", "k-1"),
            ("env.GITHUB_TOKEN", "ghp"),
            ("nested[0].url", "p"),
        ];
        assert_eq!(found, expected.map(|(path, value)| (path.to_owned(), value.to_owned())));
        let mut redacted = config.clone();
        assert_eq!(take_inline_credentials(&mut redacted).len(), expected.len());
        assert_eq!(redacted["baseUrl"], "https://[redacted]@relay.example/v1");
        assert_eq!(redacted["store"], "REDIS://:[redacted]@h:1");
        assert_eq!(redacted["headers"]["X-Api-Key"], "[redacted]");
        assert_eq!(redacted["nested"][0]["url"], "https://u:[redacted]@mcp.example/mcp");
        assert!(inline_credentials(&redacted).iter().all(|left| left.value == REDACTED));
        assert_eq!(url_credential("no url"), None);
        assert_eq!(url_credential("redis://h:1"), None);
    }

    #[test]
    fn a_credential_is_taken_out_under_any_key_and_in_a_url_s_query_wherever_a_url_is() {
        let mut config = serde_json::json!({
            "headers": {"X.Api.Key": "dotted-1", "Authorization[0]": "bracketed-2", "X-Link": "https://u:in-header-3@h/"},
            "env": {"DATABASE_URL": "postgres://u:in-env-4@db/x", "ROOT": "/work"},
            "store": "redis://h:6379/0?password=query-5", "baseUrl": "https://relay.example/v1?api_key=query-6&model=m",
        });
        let found: Vec<String> = take_inline_credentials(&mut config).into_iter().map(|found| found.value).collect();
        assert_eq!(found, ["dotted-1", "bracketed-2", "in-header-3", "in-env-4", "query-5", "query-6"]);
        let shown = config.to_string();
        assert!(!["dotted-1", "bracketed-2", "in-header-3", "in-env-4", "query-5", "query-6"]
            .iter()
            .any(|s| shown.contains(s)));
        assert_eq!(config["headers"]["X.Api.Key"], REDACTED);
        assert_eq!(config["env"]["DATABASE_URL"], "postgres://u:[redacted]@db/x");
        assert_eq!(config["env"]["ROOT"], "/work");
        assert_eq!(config["store"], "redis://h:6379/0?password=[redacted]");
        assert_eq!(config["baseUrl"], "https://relay.example/v1?api_key=[redacted]&model=m");
    }

    #[test]
    fn credential_headers_are_secrets_and_others_are_not() {
        let mut found = Secrets::default();
        found.add_header("Authorization", "Bearer tok-SECRET");
        found.add_header("X-Api-Key", "k-123456");
        found.add_header("X-Team", "blue");
        assert_eq!(found.redact("tok-SECRET k-123456 blue"), "[redacted] [redacted] blue");
    }

    #[test]
    fn a_json_line_loses_secrets_in_strings_and_keys_and_stays_json() {
        let found = secrets(&["sk-\"quoted\"-key", "1234"]);
        let line = r#"{"seq":1234,"data":{"id":"sk-\"quoted\"-key","1234":"port 1234"}}"#;
        let redacted = found.redact_json(line);
        assert_eq!(redacted, r#"{"seq":1234,"data":{"id":"[redacted]","[redacted]":"port [redacted]"}}"#);
        assert!(matches!(found.redact_json(r#"{"a":"nothing here"}"#), Cow::Borrowed(_)));
        assert!(matches!(found.redact_json(r#"{"seq":1234}"#), Cow::Borrowed(_)), "a number is not a secret's place");
    }

    proptest! {
        #[test]
        fn a_secret_split_anywhere_across_deltas_never_passes(
            before in "[a-z ]{0,12}", after in "[a-z ]{0,12}", cuts in prop::collection::vec(0usize..40, 0..5),
            short in any::<bool>(),
        ) {
            let secret = if short { "sk-42x" } else { "sk-SECRET-42-0123456789" };
            let text = format!("{before} {secret} {after} {secret}");
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
            prop_assert_eq!(passed, format!("{before} {REDACTED} {after} {REDACTED}"));
        }

        #[test]
        fn redacted_json_is_json_with_no_secret_left(
            secret in "[A-Z0-9\"\\\\]{4,20}", filler in "[a-z \"\\\\]{0,20}",
        ) {
            prop_assume!(secret.bytes().any(|byte| byte.is_ascii_alphanumeric()));
            let found = secrets(&[&secret]);
            let line = serde_json::json!({"text": format!("{filler}{secret}{filler}"), "n": 1}).to_string();
            let redacted = found.redact_json(&line);
            let value: Value = serde_json::from_str(&redacted).expect("still JSON");
            let text = value["text"].as_str().unwrap().to_owned();
            prop_assert!(found.redact(&text) == text, "nothing left to redact in {text:?}");
        }
    }
}
