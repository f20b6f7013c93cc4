//! Who may talk to `dsh web`: a local server that runs tools is a target for every page its user
//! opens, so every request must name an allowed host (DNS rebinding), carry the token (the
//! printed URL's, exchanged once for an HttpOnly, SameSite=Strict cookie, or an
//! `Authorization: Bearer` header), and a request that names an origin must name the server's
//! own — a state-changing one authenticated by the cookie must name it (CSRF). No CORS header is ever sent.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

/// The query parameter the printed URL carries the token in.
pub const TOKEN_PARAMETER: &str = "token";

/// What the guard checks requests against.
#[derive(Debug, Clone)]
pub struct Guard {
    token: String,
    /// `host:port` values a request's `Host` may carry.
    hosts: Vec<String>,
    cookie: String,
}

/// How a request proved it holds the token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Credential {
    Cookie,
    Bearer,
}

impl Guard {
    /// A guard for a server on `port` reached as `names` (the listen address, the loopback
    /// names, the names the user allows).
    pub fn new(token: String, port: u16, names: &[String]) -> Guard {
        let hosts = names.iter().map(|name| format!("{name}:{port}")).collect();
        Guard { token, hosts, cookie: format!("dsh_web_{port}") }
    }

    pub fn token(&self) -> &str {
        &self.token
    }

    fn host_allowed(&self, headers: &HeaderMap) -> bool {
        let host = headers.get(header::HOST).and_then(|host| host.to_str().ok());
        host.is_some_and(|host| self.hosts.iter().any(|allowed| allowed.eq_ignore_ascii_case(host)))
    }

    fn credential(&self, headers: &HeaderMap) -> Option<Credential> {
        let bearer = headers.get(header::AUTHORIZATION).and_then(|value| value.to_str().ok());
        if bearer.and_then(|value| value.strip_prefix("Bearer ")).is_some_and(|token| self.is_token(token)) {
            return Some(Credential::Bearer);
        }
        let cookies = headers.get_all(header::COOKIE).iter().filter_map(|value| value.to_str().ok());
        let mut pairs = cookies.flat_map(|line| line.split(';')).filter_map(|pair| pair.trim().split_once('='));
        pairs.any(|(name, value)| name == self.cookie && self.is_token(value)).then_some(Credential::Cookie)
    }

    /// Compares in time independent of where the strings differ.
    fn is_token(&self, offered: &str) -> bool {
        let (offered, token) = (offered.as_bytes(), self.token.as_bytes());
        offered.len() == token.len() && offered.iter().zip(token).fold(0u8, |diff, (a, b)| diff | (a ^ b)) == 0
    }

    /// A request that names an origin must name this server (a WebSocket or a fetch from another
    /// page is refused whatever its method); a state-changing one authenticated by the cookie must
    /// name it.
    fn origin_allowed(&self, method: &Method, headers: &HeaderMap, credential: Credential) -> bool {
        let origin = headers.get(header::ORIGIN).map(|origin| origin.to_str().unwrap_or_default());
        match origin {
            Some(origin) => {
                let host = origin.strip_prefix("http://");
                host.is_some_and(|host| self.hosts.iter().any(|allowed| allowed.eq_ignore_ascii_case(host)))
            }
            None => matches!(*method, Method::GET | Method::HEAD) || credential == Credential::Bearer,
        }
    }

    /// The cookie that holds the token for this server.
    fn set_cookie(&self) -> HeaderValue {
        let cookie = format!("{}={}; HttpOnly; SameSite=Strict; Path=/", self.cookie, self.token);
        HeaderValue::from_str(&cookie).expect("a token is printable ASCII")
    }
}

/// Refuses what the guard does not allow; trades a valid `?token=` for the cookie.
pub async fn check(State(guard): State<Arc<Guard>>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    if !guard.host_allowed(headers) {
        return refusal(StatusCode::FORBIDDEN, "this server answers only to the address dsh web printed");
    }
    if let Some(exchange) = token_exchange(&guard, &request) {
        return exchange;
    }
    let Some(credential) = guard.credential(headers) else {
        return refusal(StatusCode::UNAUTHORIZED, "open the address dsh web printed: it carries the token");
    };
    if !guard.origin_allowed(request.method(), headers, credential) {
        return refusal(StatusCode::FORBIDDEN, "a request from another origin is refused");
    }
    let mut response = next.run(request).await;
    hardened(response.headers_mut());
    response
}

/// `GET /?token=T` with the right token: the cookie, and the page without the token in its URL.
fn token_exchange(guard: &Guard, request: &Request) -> Option<Response> {
    let query = request.uri().query()?;
    let pairs = query.split('&').filter_map(|pair| pair.split_once('='));
    let offered = pairs.filter(|(name, _)| *name == TOKEN_PARAMETER).map(|(_, value)| value).next()?;
    if request.method() != Method::GET || !guard.is_token(offered) {
        return Some(refusal(StatusCode::UNAUTHORIZED, "the token is not this server's"));
    }
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::SEE_OTHER;
    let headers = response.headers_mut();
    headers.insert(header::LOCATION, HeaderValue::from_static("/"));
    headers.insert(header::SET_COOKIE, guard.set_cookie());
    hardened(headers);
    Some(response)
}

fn refusal(status: StatusCode, message: &str) -> Response {
    let mut response = (status, axum::Json(serde_json::json!({"error": message}))).into_response();
    hardened(response.headers_mut());
    response
}

/// Headers every answer carries: nothing framed, sniffed, cached or loaded from elsewhere.
fn hardened(headers: &mut HeaderMap) {
    let fixed = [
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::CACHE_CONTROL, "no-store"),
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; \
             frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
        ),
    ];
    for (name, value) in fixed {
        headers.insert(name, HeaderValue::from_static(value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard() -> Guard {
        Guard::new("secret-token".into(), 3080, &["127.0.0.1".into(), "localhost".into()])
    }

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        pairs.iter().map(|(name, value)| (name.clone(), HeaderValue::from_str(value).unwrap())).collect()
    }

    #[test]
    fn only_the_listen_names_with_their_port_are_hosts() {
        let guard = guard();
        assert!(guard.host_allowed(&headers(&[(header::HOST, "127.0.0.1:3080")])));
        assert!(guard.host_allowed(&headers(&[(header::HOST, "LOCALHOST:3080")])));
        assert!(!guard.host_allowed(&headers(&[(header::HOST, "attacker.example:3080")])));
        assert!(!guard.host_allowed(&headers(&[(header::HOST, "127.0.0.1:3081")])));
        assert!(!guard.host_allowed(&HeaderMap::new()));
    }

    #[test]
    fn the_cookie_or_a_bearer_header_carries_the_token_and_nothing_near_it_does() {
        let guard = guard();
        let cookie = |value: &str| guard.credential(&headers(&[(header::COOKIE, value)]));
        assert_eq!(cookie("a=b; dsh_web_3080=secret-token"), Some(Credential::Cookie));
        assert_eq!(cookie("dsh_web_3080=secret-tokeN"), None);
        assert_eq!(cookie("dsh_web_3081=secret-token"), None);
        assert_eq!(cookie("dsh_web_3080=secret-token-and-more"), None);
        let bearer = headers(&[(header::AUTHORIZATION, "Bearer secret-token")]);
        assert_eq!(guard.credential(&bearer), Some(Credential::Bearer));
    }

    #[test]
    fn another_origin_is_refused_and_a_cookie_post_needs_this_server_s_origin() {
        let guard = guard();
        let post = Method::POST;
        let origin = |value: &str| headers(&[(header::ORIGIN, value)]);
        assert!(guard.origin_allowed(&post, &origin("http://127.0.0.1:3080"), Credential::Cookie));
        assert!(!guard.origin_allowed(&post, &origin("http://attacker.example"), Credential::Cookie));
        assert!(!guard.origin_allowed(&post, &origin("null"), Credential::Cookie));
        assert!(!guard.origin_allowed(&post, &HeaderMap::new(), Credential::Cookie));
        assert!(guard.origin_allowed(&post, &HeaderMap::new(), Credential::Bearer));
        assert!(!guard.origin_allowed(&post, &origin("http://attacker.example"), Credential::Bearer));
        assert!(!guard.origin_allowed(&Method::GET, &origin("http://attacker.example"), Credential::Cookie));
        assert!(guard.origin_allowed(&Method::GET, &HeaderMap::new(), Credential::Cookie));
    }
}
