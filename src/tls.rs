//! TLS with rustls (the `ring` provider): the server's configuration from
//! `[server.tls]` PEM files, and a client configuration trusting one CA,
//! for the Rust client, `wharf-bench` and tests over `wss://`.

use std::path::Path;
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::config::{ConfigError, TlsConfig};

fn invalid(key: &str, reason: String) -> ConfigError {
    ConfigError::Invalid {
        key: key.into(),
        reason,
    }
}

/// The certificates of a PEM file.
///
/// # Errors
/// A file that cannot be read or holds no certificate.
pub fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no certificate in it", path.display()));
    }
    Ok(certs)
}

/// The server side of `[server.tls]`.
///
/// # Errors
/// [`ConfigError::Invalid`] naming `server.tls.cert` or `server.tls.key`.
pub fn server_config(tls: &TlsConfig) -> Result<rustls::ServerConfig, ConfigError> {
    let certs = read_certs(&tls.cert).map_err(|e| invalid("server.tls.cert", e))?;
    let key = PrivateKeyDer::from_pem_file(&tls.key).map_err(|e| {
        invalid(
            "server.tls.key",
            format!("{}: not a PEM private key: {e}", tls.key.display()),
        )
    })?;
    let mut config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| {
            invalid(
                "server.tls",
                format!("the key does not fit the certificate: {e}"),
            )
        })?;
    // WebSockets need HTTP/1.1.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// A client configuration trusting the CA certificates in `ca_pem`: what
/// [`crate::client::ClientOptions::tls`] takes to connect to `wss://`.
///
/// # Errors
/// A file that cannot be read or holds no usable certificate.
pub fn client_config(ca_pem: &Path) -> Result<Arc<rustls::ClientConfig>, String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in read_certs(ca_pem)? {
        roots
            .add(cert)
            .map_err(|e| format!("{}: {e}", ca_pem.display()))?;
    }
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}
