//! The HTTP client every outgoing connection is built from (model providers, MCP servers over
//! streamable HTTP): rustls with the `ring` provider, system roots, dsh's user agent.

use std::sync::Once;

/// The `User-Agent` dsh sends.
pub const USER_AGENT: &str = concat!("dsh/", env!("CARGO_PKG_VERSION"));

/// A client builder with TLS ready and dsh's user agent.
pub fn client_builder() -> reqwest::ClientBuilder {
    install_crypto_provider();
    reqwest::Client::builder().user_agent(USER_AGENT)
}

/// reqwest is built without a crypto provider of its own (its default, aws-lc, needs a C
/// toolchain and doubles the build); rustls takes the process default, installed once here.
fn install_crypto_provider() {
    static INSTALLED: Once = Once::new();
    INSTALLED.call_once(|| {
        // Another part of the process may have installed one first; either serves.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}
