//! Server wait hints → `providerRetryAfterMs`.
//!
//! Read in order: `retry-after-ms` (milliseconds, may be fractional); `Retry-After` as
//! delta-seconds (integer or decimal); `Retry-After` as an HTTP-date (IMF-fixdate, RFC 850 or
//! asctime) relative to the response's `Date` header, else the local clock. A value made only of
//! digits is never read as a date. Zero, negative, past, non-finite and unreadable hints are
//! absent — never "retry immediately". The value is a fact: executors decide what to do with it.

use std::time::SystemTime;

use jiff::Timestamp;

fn positive(ms: f64) -> Option<f64> {
    (ms.is_finite() && ms > 0.0).then_some(ms)
}

fn decimal(text: &str) -> Option<f64> {
    let text = text.trim();
    let valid = !text.is_empty()
        && text.bytes().all(|byte| byte.is_ascii_digit() || byte == b'.')
        && text.bytes().filter(|byte| *byte == b'.').count() <= 1
        && !text.starts_with('.')
        && !text.ends_with('.');
    if valid {
        text.parse().ok()
    } else {
        None
    }
}

/// The prefix under which a gateway forwards the provider's wait hints (LiteLLM's proxy sends
/// `llm_provider-retry-after` and `llm_provider-retry-after-ms` only); they are read when the
/// response has neither plain header.
pub const GATEWAY_PREFIX: &str = "llm_provider-";

/// The hint in milliseconds from a response's `retry-after-ms`, `retry-after` and `date`
/// header values, given the local clock.
pub fn provider_retry_after_ms(
    retry_after_ms: Option<&str>,
    retry_after: Option<&str>,
    date: Option<&str>,
    now: SystemTime,
) -> Option<f64> {
    if let Some(ms) = retry_after_ms.and_then(|value| value.trim().parse::<f64>().ok()).and_then(positive) {
        return Some(ms);
    }
    let value = retry_after?.trim();
    if let Some(seconds) = decimal(value) {
        return positive(seconds * 1000.0);
    }
    if value.bytes().all(|byte| byte.is_ascii_digit() || byte == b'-' || byte == b'+') {
        return None;
    }
    let at = http_date(value)?;
    let reference = date.and_then(http_date).or_else(|| Timestamp::try_from(now).ok())?;
    positive(at.duration_since(reference).as_secs_f64() * 1000.0)
}

/// An HTTP-date in any of its three forms (RFC 9110, section 5.6.7): IMF-fixdate, the obsolete
/// RFC 850 form, and asctime's.
pub fn http_date(text: &str) -> Option<Timestamp> {
    let text = text.trim();
    if let Ok(zoned) = jiff::fmt::rfc2822::parse(text) {
        return Some(zoned.timestamp());
    }
    ["%A, %d-%b-%y %H:%M:%S GMT", "%a %b %e %H:%M:%S %Y"].iter().find_map(|format| {
        let local = jiff::civil::DateTime::strptime(format, text).ok()?;
        Some(local.to_zoned(jiff::tz::TimeZone::UTC).ok()?.timestamp())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::time::Duration;

    fn now() -> SystemTime {
        SystemTime::from(http_date("Sun, 29 Nov 2026 16:00:00 GMT").unwrap())
    }

    fn hint(ms: Option<&str>, after: Option<&str>, date: Option<&str>) -> Option<f64> {
        provider_retry_after_ms(ms, after, date, now())
    }

    #[test]
    fn milliseconds_win_and_may_be_fractional() {
        assert_eq!(hint(Some("1500.5"), Some("9"), None), Some(1500.5));
        assert_eq!(hint(Some("0"), Some("2"), None), Some(2000.0), "a zero ms hint falls back to Retry-After");
    }

    #[test]
    fn delta_seconds_may_be_decimal() {
        assert_eq!(hint(None, Some("1"), None), Some(1000.0));
        assert_eq!(hint(None, Some(" 2.5 "), None), Some(2500.0));
    }

    #[test]
    fn http_dates_in_all_three_forms_are_relative_to_the_date_header() {
        let date = Some("Sun, 29 Nov 2026 15:59:50 GMT");
        assert_eq!(hint(None, Some("Sun, 29 Nov 2026 16:00:00 GMT"), date), Some(10_000.0));
        assert_eq!(hint(None, Some("Sunday, 29-Nov-26 16:00:05 GMT"), None), Some(5_000.0));
        assert_eq!(hint(None, Some("Sun Nov 29 16:00:03 2026"), None), Some(3_000.0));
        let early_in_the_month = http_date("Fri Nov  6 08:49:37 2026").unwrap();
        assert_eq!(early_in_the_month, http_date("Fri, 06 Nov 2026 08:49:37 GMT").unwrap());
    }

    #[test]
    fn useless_hints_are_absent() {
        for bad in ["0", "-5", "Sun, 29 Nov 2026 15:00:00 GMT", "soon", "", "1e3", "NaN", "inf", "12abc", "--1"] {
            assert_eq!(hint(None, Some(bad), None), None, "{bad:?}");
        }
        assert_eq!(hint(Some("-1"), None, None), None);
        assert_eq!(hint(Some("NaN"), None, None), None);
        assert_eq!(hint(None, None, None), None);
    }

    #[test]
    fn huge_hints_are_kept_as_facts() {
        assert_eq!(hint(None, Some("99999999999"), None), Some(99_999_999_999_000.0));
        assert_eq!(hint(None, Some(&"9".repeat(400)), None), None, "an infinite hint is absent");
    }

    #[test]
    fn digits_are_never_read_as_a_date() {
        assert_eq!(
            provider_retry_after_ms(None, Some("2026"), None, SystemTime::UNIX_EPOCH + Duration::from_secs(1)),
            Some(2_026_000.0)
        );
    }

    proptest! {
        #[test]
        fn any_header_text_gives_a_positive_finite_hint_or_none(ms in ".{0,20}", after in ".{0,40}", date in ".{0,40}") {
            if let Some(value) = provider_retry_after_ms(Some(&ms), Some(&after), Some(&date), now()) {
                prop_assert!(value.is_finite() && value > 0.0);
            }
        }
    }
}
