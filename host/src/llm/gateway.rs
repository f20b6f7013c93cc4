//! Gateways that retry failed requests on their own, known by the headers of their responses.
//! Behind one, every failure dsh retries is retried by both layers, so one turn can cost many
//! times the requests and waits either layer alone would spend: dsh says so once per route, with
//! the setting that turns one of the two off (a row with `gatewayRetries: false` is not told).

use reqwest::header::HeaderMap;

/// A gateway that retries by default.
pub struct RetryingGateway {
    pub name: &'static str,
    /// Every response of the gateway carries a header named with this prefix.
    pub header_prefix: &'static str,
    /// The header counting the retries the gateway made for this response (on its successes).
    pub retries_header: &'static str,
    /// How its own retries are turned off.
    pub turn_off: &'static str,
}

/// The retrying gateways dsh recognises.
pub const GATEWAYS: [RetryingGateway; 1] = [RetryingGateway {
    name: "LiteLLM",
    header_prefix: "x-litellm-",
    retries_header: "x-litellm-attempted-retries",
    turn_off: "num_retries: 0 under litellm_settings in the proxy's config.yaml",
}];

/// The warning for a response of route `provider` (row `row_id`) whose headers show a retrying
/// gateway, if they do.
pub fn warning(provider: &str, row_id: &str, headers: &HeaderMap) -> Option<String> {
    let gateway =
        GATEWAYS.iter().find(|gateway| headers.keys().any(|name| name.as_str().starts_with(gateway.header_prefix)))?;
    let retried = headers
        .get(gateway.retries_header)
        .and_then(|value| value.to_str().ok())
        .and_then(|count| count.trim().parse::<u64>().ok())
        .filter(|count| *count > 0)
        .map(|count| format!(", which retried this request {count} time{}", if count == 1 { "" } else { "s" }))
        .unwrap_or_default();
    Some(format!(
        "provider {provider} answers through a {name} proxy ({prefix}* headers){retried}; it retries failures \
         itself, so with dsh retrying too one failure can cost many requests and long waits: set {turn_off} \
         (and gatewayRetries: false on row \"{row_id}\"), or retryPolicy: {{mode: normal, maxRetries: 0}} on \
         that row to leave retries to the proxy",
        name = gateway.name,
        prefix = gateway.header_prefix,
        turn_off = gateway.turn_off,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    #[test]
    fn a_litellm_response_is_named_with_its_retries_and_both_ways_out() {
        let mut headers = HeaderMap::new();
        headers.insert("x-litellm-call-id", HeaderValue::from_static("c1"));
        let plain = warning("relay", "llm-relay", &headers).unwrap();
        assert!(plain.starts_with("provider relay answers through a LiteLLM proxy (x-litellm-* headers); it retries"));
        assert!(plain.ends_with(
            "(and gatewayRetries: false on row \"llm-relay\"), or retryPolicy: {mode: normal, maxRetries: 0} on that \
             row to leave retries to the proxy"
        ));
        headers.insert("x-litellm-attempted-retries", HeaderValue::from_static("2"));
        assert!(warning("relay", "r", &headers)
            .unwrap()
            .contains("(x-litellm-* headers), which retried this request 2 times;"));
    }

    #[test]
    fn a_response_without_gateway_headers_says_nothing() {
        let mut headers = HeaderMap::new();
        headers.insert("x-request-id", HeaderValue::from_static("r"));
        assert_eq!(warning("p", "r", &headers), None);
    }
}
