//! The proxy's own resolver: the sandbox has no DNS, the proxy looks names up itself and
//! connects to the address it checked (no second lookup, so no DNS rebinding).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use crate::dns::{self, Answer};
use crate::target::valid_host;

/// Each query is sent at most this many times to each server.
const TRIES: usize = 2;
const TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolver {
    /// The host's resolver (`getaddrinfo`).
    System,
    /// These name servers, asked in order over UDP.
    Servers(Vec<SocketAddr>),
}

impl Resolver {
    pub fn new(servers: &[SocketAddr]) -> Resolver {
        if servers.is_empty() {
            Resolver::System
        } else {
            Resolver::Servers(servers.to_vec())
        }
    }

    /// Every address of `host` (an IP literal is its own answer).
    pub async fn lookup(&self, host: &str) -> Result<Vec<IpAddr>, String> {
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Ok(vec![ip]);
        }
        if !valid_host(host) {
            return Err("not a valid host name".into());
        }
        let found = match self {
            Resolver::System => tokio::net::lookup_host((host, 0))
                .await
                .map(|it| it.map(|a| a.ip()).collect::<Vec<_>>())
                .map_err(|e| e.to_string())?,
            Resolver::Servers(servers) => {
                let mut all = Vec::new();
                for qtype in [dns::TYPE_A, dns::TYPE_AAAA] {
                    all.extend(ask(servers, host, qtype).await?);
                }
                all
            }
        };
        if found.is_empty() {
            return Err("no address".into());
        }
        Ok(found)
    }
}

async fn ask(servers: &[SocketAddr], host: &str, qtype: u16) -> Result<Vec<IpAddr>, String> {
    let mut last = String::from("no name server answered");
    for server in servers {
        let bind: SocketAddr = if server.is_ipv4() {
            SocketAddr::from(([0, 0, 0, 0], 0))
        } else {
            SocketAddr::from(([0u16; 8], 0))
        };
        let sock = tokio::net::UdpSocket::bind(bind)
            .await
            .map_err(|e| e.to_string())?;
        if let Err(e) = sock.connect(server).await {
            last = e.to_string();
            continue;
        }
        for _ in 0..TRIES {
            let id: u16 = rand::random();
            if let Err(e) = sock.send(&dns::query(id, host, qtype)).await {
                last = e.to_string();
                break;
            }
            let deadline = tokio::time::Instant::now() + TIMEOUT;
            let mut buf = [0u8; 1500];
            loop {
                match tokio::time::timeout_at(deadline, sock.recv(&mut buf)).await {
                    Err(_) => {
                        last = format!("no answer from {server}");
                        break;
                    }
                    Ok(Err(e)) => {
                        last = e.to_string();
                        break;
                    }
                    Ok(Ok(n)) => match dns::parse(id, &buf[..n]) {
                        Answer::Foreign => continue,
                        Answer::Addresses(a) => return Ok(a),
                        Answer::NoData => return Ok(Vec::new()),
                        Answer::Failed(rcode) => {
                            last = format!("{server} answered with error code {rcode}");
                            break;
                        }
                    },
                }
            }
        }
    }
    Err(last)
}
