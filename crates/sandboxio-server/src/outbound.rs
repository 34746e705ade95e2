//! The server's outbound HTTP client (the approval webhook): one HTTP/1.1 request per
//! attempt over a fresh connection. `https://` is TLS (rustls, ring) with the receiver's
//! certificate verified against a configured CA bundle (only those CAs) or the system's
//! roots, and its name checked; `http://` is allowed only to a loopback address (every
//! address the host resolves to must be loopback, checked at each connect), so a secret's
//! signature and an approval's contents never cross a network in the clear.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio_rustls::rustls;
use tokio_rustls::TlsConnector;

/// Where requests go, and how the connection is secured.
pub struct Target {
    host: String,
    port: u16,
    /// The `Host` header.
    authority: String,
    tls: Option<(TlsConnector, ServerName<'static>)>,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("authority", &self.authority)
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

fn is_loopback_name(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The roots that verify receivers: `ca_file`'s certificates only, or the system bundle.
fn roots(ca_file: Option<&Path>) -> Result<rustls::RootCertStore, String> {
    let mut roots = rustls::RootCertStore::empty();
    let (what, pem) = match ca_file {
        Some(p) => (
            format!("`{}`", p.display()),
            std::fs::read(p)
                .map_err(|e| format!("cannot read the CA file `{}`: {}", p.display(), e.kind()))?,
        ),
        None => {
            let (_, text) = sandboxio_gateway::egress::edge::system_bundle();
            ("the system CA bundle".to_string(), text.into_bytes())
        }
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
        .filter_map(Result::ok)
        .collect();
    let (added, _) = roots.add_parsable_certificates(certs);
    if added == 0 {
        return Err(format!("{what} holds no usable CA certificate"));
    }
    Ok(roots)
}

impl Target {
    /// Checks `uri` (https, or http to loopback) and prepares its TLS client.
    pub fn new(uri: &hyper::Uri, ca_file: Option<&Path>) -> Result<Target, String> {
        let host = uri
            .host()
            .filter(|h| !h.is_empty())
            .ok_or("the URL has no host")?
            .to_string();
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err("the URL is neither https:// nor http://".into()),
        };
        if !https && !is_loopback_name(&host) {
            return Err(format!(
                "plain http:// is allowed only to a loopback address, not `{host}`: use https://"
            ));
        }
        if !https && ca_file.is_some() {
            return Err("`ca_file` is for an https:// URL".into());
        }
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let authority = uri
            .authority()
            .map(|a| a.as_str().to_string())
            .unwrap_or_else(|| host.clone());
        let tls = if https {
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|e| e.to_string())?
                .with_root_certificates(roots(ca_file)?)
                .with_no_client_auth();
            cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
            let bare = host.trim_start_matches('[').trim_end_matches(']');
            let name = ServerName::try_from(bare.to_string())
                .map_err(|_| format!("`{host}` is not a name a certificate can carry"))?;
            Some((TlsConnector::from(Arc::new(cfg)), name))
        } else {
            None
        };
        Ok(Target {
            host,
            port,
            authority,
            tls,
        })
    }

    async fn connect(&self) -> Result<tokio::net::TcpStream, String> {
        let bare = self.host.trim_start_matches('[').trim_end_matches(']');
        let addrs: Vec<SocketAddr> = tokio::net::lookup_host((bare, self.port))
            .await
            .map_err(|e| format!("cannot resolve `{}` ({e})", self.host))?
            .collect();
        if self.tls.is_none() && addrs.iter().any(|a| !a.ip().is_loopback()) {
            return Err(format!(
                "`{}` resolves to an address that is not loopback: plain http:// refused",
                self.host
            ));
        }
        let mut last = format!("`{}` resolves to no address", self.host);
        for a in addrs {
            match tokio::net::TcpStream::connect(a).await {
                Ok(s) => {
                    let _ = s.set_nodelay(true);
                    return Ok(s);
                }
                Err(e) => last = format!("cannot connect to {a} ({e})"),
            }
        }
        Err(last)
    }

    /// POSTs `body` with `headers` to `path_and_query`; the answer's status (its body is
    /// read and dropped).
    pub async fn post(
        &self,
        path_and_query: &str,
        headers: &[(&str, String)],
        body: Bytes,
    ) -> Result<hyper::StatusCode, String> {
        let mut req = hyper::Request::post(path_and_query)
            .header(hyper::header::HOST, &self.authority)
            .header(hyper::header::CONNECTION, "close");
        for (k, v) in headers {
            req = req.header(*k, v);
        }
        let req = req
            .body(Full::new(body))
            .map_err(|_| "the request could not be built".to_string())?;
        let tcp = self.connect().await?;
        match &self.tls {
            Some((connector, name)) => {
                let tls = connector
                    .connect(name.clone(), tcp)
                    .await
                    .map_err(|e| format!("TLS with `{}` failed ({e})", self.host))?;
                send(TokioIo::new(tls), req).await
            }
            None => send(TokioIo::new(tcp), req).await,
        }
    }
}

async fn send<I>(io: I, req: hyper::Request<Full<Bytes>>) -> Result<hyper::StatusCode, String>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| format!("HTTP handshake failed ({e})"))?;
    let driver = tokio::spawn(conn);
    let res = sender.send_request(req).await;
    let out = match res {
        Ok(res) => {
            let status = res.status();
            let _ = res.into_body().collect().await;
            Ok(status)
        }
        Err(e) => Err(format!("the request failed ({e})")),
    };
    driver.abort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(url: &str) -> Result<Target, String> {
        Target::new(&url.parse().unwrap(), None)
    }

    #[test]
    fn plain_http_only_to_loopback_and_https_needs_usable_roots() {
        assert!(t("http://127.0.0.1:9/h").is_ok());
        assert!(t("http://localhost:9/h").is_ok());
        assert!(t("http://[::1]:9/h").is_ok());
        let e = t("http://hooks.example.com/h").unwrap_err();
        assert!(e.contains("loopback"), "{e}");
        assert!(t("http://10.0.0.1/h").is_err());
        assert!(t("ftp://127.0.0.1/h").is_err());
        let d = tempfile::tempdir().unwrap();
        let junk = d.path().join("junk.pem");
        std::fs::write(&junk, "not a certificate\n").unwrap();
        let e = Target::new(&"https://127.0.0.1/h".parse().unwrap(), Some(&junk)).unwrap_err();
        assert!(e.contains("no usable CA"), "{e}");
        let e = Target::new(&"http://127.0.0.1/h".parse().unwrap(), Some(&junk)).unwrap_err();
        assert!(e.contains("https"), "{e}");
    }
}
