//! Provider-neutral failure codes for HTTP error responses, and short useful messages: a JSON
//! error's own message, an HTML error page reduced to its title, a plain body cut to a line.

use std::sync::LazyLock;

use regex::Regex;

/// Wording of an exhausted quota or balance, as opposed to a transient rate limit.
static QUOTA: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)\binsufficient[\s_-]+(quota|balance|credits?|funds)\b|\b(quota|usage[\s_-]+limit)[\s_-]+(exceeded|exhausted|reached)\b|\bexceed(ed|s)?[\s_-]+(your|the)?[\s_-]*(current[\s_-]+)?quota\b|\b(balance|credits?)[\s_-]+(exhausted|depleted|too[\s_-]+low)\b|\bout[\s_-]+of[\s_-]+(credits?|budget)\b",
    )
    .expect("valid regex")
});

/// Wording of a request that exceeds the model's context window.
static CONTEXT_WINDOW: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)context[\s_-](length|window)[\s_-](exceed(ed|s)?|overflow(ed)?|limit[\s_-]exceeded)|\b(maximum|max)(\s+(allowed|supported))?\s+context\s+(length|window)\b|\b(request|prompt|input|messages?)\s+(is\s+|are\s+)?too\s+(large|long)\s+for\s+((this|the)\s+)?(model('s)?\s+)?(context|model)\b|\b(input|prompt|request|messages?)\b.{0,40}\b(exceed(s|ed)?|overflows?|is\s+larger\s+than)\b.{0,40}\bcontext\b",
    )
    .expect("valid regex")
});

static TITLE: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"(?is)<title[^>]*>(.*?)</title>").expect("valid regex"));
static TAG: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"(?s)<[^>]*>").expect("valid regex"));

const MESSAGE_CHARS: usize = 200;

/// Every failure code the adapter can produce, each with an HTTP status it comes with (`None`:
/// no response); `HTTP_404` stands for the `HTTP_<status>` family.
pub const ADAPTER_CODES: [(&str, Option<u32>); 15] = [
    ("TRANSPORT", None),
    ("TIMEOUT", None),
    ("RATE_LIMIT", Some(429)),
    ("QUOTA", Some(402)),
    ("AUTH", Some(401)),
    ("SERVER", Some(503)),
    ("CONTEXT_WINDOW_EXCEEDED", Some(400)),
    ("INVALID_REQUEST", Some(400)),
    ("HTTP_404", Some(404)),
    ("STREAM_CLOSED", None),
    ("MALFORMED_RESPONSE", None),
    ("EMPTY_RESPONSE", None),
    ("MISSING_CREDENTIAL", None),
    ("INVALID_CREDENTIAL", None),
    ("UNKNOWN", None),
];

/// The code of an HTTP error response, from its status and the provider's error detail (code,
/// type and message text).
pub fn http_failure_code(status: u16, detail: &str) -> String {
    match status {
        401 => "AUTH".to_owned(),
        402 => "QUOTA".to_owned(),
        403 | 429 if QUOTA.is_match(detail) => "QUOTA".to_owned(),
        403 => "AUTH".to_owned(),
        429 => "RATE_LIMIT".to_owned(),
        400 if CONTEXT_WINDOW.is_match(detail) => "CONTEXT_WINDOW_EXCEEDED".to_owned(),
        400 => "INVALID_REQUEST".to_owned(),
        // A gateway's own timeout (LiteLLM answers 408 when the provider stalls): the stall a
        // direct request sees as TIMEOUT.
        408 => "TIMEOUT".to_owned(),
        500..=599 => "SERVER".to_owned(),
        404..=499 => format!("HTTP_{status}"),
        _ => "UNKNOWN".to_owned(),
    }
}

fn collapse(text: &str) -> String {
    crate::one_line(text, MESSAGE_CHARS)
}

/// What an error body says: `(detail for classification, text for the message)`.
pub fn describe_body(content_type: Option<&str>, body: &[u8]) -> (String, String) {
    let text = String::from_utf8_lossy(body);
    let trimmed = text.trim();
    if let Ok(value) = serde_json::from_str::<serde_json::Value>(trimmed) {
        let error = value.get("error").unwrap_or(&value);
        let field = |key: &str| {
            error.get(key).and_then(|v| v.as_str().map(str::to_owned).or_else(|| v.as_i64().map(|n| n.to_string())))
        };
        let message = field("message").or_else(|| error.as_str().map(str::to_owned)).or_else(|| field("detail"));
        let detail =
            [field("code"), field("type"), message.clone()].into_iter().flatten().collect::<Vec<_>>().join(" ");
        if let Some(message) = message {
            return (detail, collapse(&message));
        }
    }
    let html = content_type.is_some_and(|kind| kind.contains("html")) || trimmed.starts_with('<');
    let readable = if html {
        match TITLE.captures(trimmed) {
            Some(title) => collapse(&title[1]),
            None => collapse(&TAG.replace_all(trimmed, " ")),
        }
    } else {
        collapse(trimmed)
    };
    (collapse(&TAG.replace_all(trimmed, " ")), readable)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_to_codes() {
        assert_eq!(http_failure_code(401, ""), "AUTH");
        assert_eq!(http_failure_code(403, "forbidden"), "AUTH");
        assert_eq!(http_failure_code(403, "insufficient_quota You exceeded your current quota"), "QUOTA");
        assert_eq!(http_failure_code(402, ""), "QUOTA");
        assert_eq!(http_failure_code(429, "Rate limit reached"), "RATE_LIMIT");
        assert_eq!(http_failure_code(429, "Insufficient Balance"), "QUOTA");
        assert_eq!(
            http_failure_code(400, "This model's maximum context length is 65536 tokens"),
            "CONTEXT_WINDOW_EXCEEDED"
        );
        assert_eq!(http_failure_code(400, "messages: field required"), "INVALID_REQUEST");
        assert_eq!(http_failure_code(503, ""), "SERVER");
        assert_eq!(http_failure_code(404, ""), "HTTP_404");
        assert_eq!(http_failure_code(422, ""), "HTTP_422");
        assert_eq!(http_failure_code(408, ""), "TIMEOUT", "a gateway's timeout is the stall it reports");
        assert_eq!(http_failure_code(302, ""), "UNKNOWN");
    }

    #[test]
    fn context_window_wordings_are_recognised() {
        for wording in [
            "context_length_exceeded",
            "Request too large for the model's context window",
            "the prompt is too long for this model",
            "input of 90000 tokens exceeds the model context length",
        ] {
            assert!(CONTEXT_WINDOW.is_match(wording), "{wording}");
        }
        assert!(!CONTEXT_WINDOW.is_match("invalid context parameter"));
    }

    #[test]
    fn an_html_error_page_is_reduced_to_its_title() {
        let page = b"<html><head><title>503 Service Unavailable</title></head><body><h1>cloudflare</h1></body></html>";
        assert_eq!(describe_body(Some("text/html"), page).1, "503 Service Unavailable");
        assert_eq!(describe_body(None, b"<html><body><h1>Bad   gateway</h1></body></html>").1, "Bad gateway");
    }

    #[test]
    fn a_json_error_gives_its_message_and_detail() {
        let body = br#"{"error":{"message":"Rate limit reached","type":"rate_limit_error","code":"rate_limit"}}"#;
        assert_eq!(
            describe_body(Some("application/json"), body),
            ("rate_limit rate_limit_error Rate limit reached".into(), "Rate limit reached".into())
        );
    }

    #[test]
    fn long_plain_bodies_are_cut() {
        let body = "x".repeat(1000);
        assert_eq!(describe_body(None, body.as_bytes()).1.chars().count(), MESSAGE_CHARS + 1);
    }
}
