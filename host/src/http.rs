//! HTTP clients (the model's and MCP servers'): reqwest over rustls with *ring* as its
//! cryptography (already built for the file hashes; no C toolchain needed), trusting the
//! system's certificate store.

/// Builds a client configured by `configure`, with the process's TLS provider installed
/// first (once). A system without CA certificates (a minimal container) still gets a client:
/// plain HTTP works (a local model, a loopback MCP server) and HTTPS fails at connection with
/// an untrusted certificate, after one warning naming the cause.
pub(crate) fn client(
    configure: impl Fn(reqwest::ClientBuilder) -> reqwest::ClientBuilder,
) -> reqwest::Result<reqwest::Client> {
    static PROVIDER: std::sync::Once = std::sync::Once::new();
    PROVIDER.call_once(|| {
        // Fails only when a provider is installed already, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
    match configure(reqwest::Client::builder()).build() {
        Ok(client) => Ok(client),
        Err(error) => {
            let fallback = configure(reqwest::Client::builder()).tls_certs_only([]).build();
            if fallback.is_ok() {
                static WARNED: std::sync::Once = std::sync::Once::new();
                WARNED.call_once(|| {
                    let chain: Vec<String> =
                        std::iter::successors(Some(&error as &dyn std::error::Error), |e| {
                            e.source()
                        })
                        .map(ToString::to_string)
                        .collect();
                    tracing::warn!(
                        error = %chain.join(": "),
                        "no usable CA certificates in the system's store (install \
                         ca-certificates): HTTPS connections will not be trusted"
                    );
                });
            }
            fallback.map_err(|_| error)
        }
    }
}
