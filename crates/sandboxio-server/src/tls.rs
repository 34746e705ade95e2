//! TLS with rustls (ring provider): a certificate chain and a private key, both PEM.

use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls;
use tokio_rustls::TlsAcceptor;

use crate::error::ServerError;
use crate::options::TlsFiles;

pub fn acceptor(files: &TlsFiles) -> Result<TlsAcceptor, ServerError> {
    let bad = |what: &'static str, path: &std::path::Path, why: String| ServerError::Tls {
        what,
        path: path.display().to_string(),
        why,
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
        .map_err(|e| bad("certificate", &files.cert, e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| bad("certificate", &files.cert, e.to_string()))?;
    if certs.is_empty() {
        return Err(bad(
            "certificate",
            &files.cert,
            "no certificate in the file".into(),
        ));
    }
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| bad("key", &files.key, e.to_string()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad("certificate", &files.cert, e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| bad("key", &files.key, e.to_string()))?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(cfg)))
}
