//! HTTP clients (the model's and MCP servers'): reqwest over rustls with *ring* as its
//! cryptography (already built for the file hashes; no C toolchain needed) and the system's
//! certificate store.

/// A client builder, with the process's TLS provider installed first (once).
pub(crate) fn builder() -> reqwest::ClientBuilder {
    static PROVIDER: std::sync::Once = std::sync::Once::new();
    PROVIDER.call_once(|| {
        // Fails only when a provider is installed already, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
    reqwest::Client::builder()
}
