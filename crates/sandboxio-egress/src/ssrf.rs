//! The SSRF guard's address classes: what a sandbox may never reach unless
//! `[network] allow_private` names the address, or a rule naming it as an IP literal
//! allows the connection (`Rules::exempts`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::cidr::Cidr;

/// Refused IPv4 blocks, most specific first (the first match names the class).
const V4: &[(Cidr, &str)] = &[
    (Cidr::v4(169, 254, 169, 254, 32), "cloud metadata"),
    (Cidr::v4(169, 254, 170, 2, 32), "cloud metadata"),
    (Cidr::v4(100, 100, 100, 200, 32), "cloud metadata"),
    (Cidr::v4(0, 0, 0, 0, 8), "unspecified"),
    (Cidr::v4(127, 0, 0, 0, 8), "loopback"),
    (Cidr::v4(10, 0, 0, 0, 8), "private"),
    (Cidr::v4(172, 16, 0, 0, 12), "private"),
    (Cidr::v4(192, 168, 0, 0, 16), "private"),
    (Cidr::v4(169, 254, 0, 0, 16), "link-local"),
    (Cidr::v4(100, 64, 0, 0, 10), "CGNAT"),
    (Cidr::v4(192, 0, 0, 0, 24), "IETF protocol assignment"),
    (Cidr::v4(198, 18, 0, 0, 15), "benchmarking"),
    (Cidr::v4(224, 0, 0, 0, 4), "multicast"),
    (Cidr::v4(240, 0, 0, 0, 4), "reserved"),
];

/// Refused IPv6 blocks (addresses embedding IPv4 are judged by the IPv4 address).
const V6: &[(Cidr, &str)] = &[
    (
        Cidr::v6([0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254], 128),
        "cloud metadata",
    ),
    (Cidr::v6([0, 0, 0, 0, 0, 0, 0, 0], 128), "unspecified"),
    (Cidr::v6([0, 0, 0, 0, 0, 0, 0, 1], 128), "loopback"),
    (Cidr::v6([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10), "link-local"),
    (Cidr::v6([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10), "site-local"),
    (Cidr::v6([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7), "private"),
    (Cidr::v6([0xff00, 0, 0, 0, 0, 0, 0, 0], 8), "multicast"),
];

/// The class that makes `ip` refused, or `None` for a public address.
pub fn forbidden_class(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => class_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = embedded_v4(v6) {
                return class_v4(v4);
            }
            V6.iter()
                .find(|(c, _)| c.contains(IpAddr::V6(v6)))
                .map(|(_, why)| *why)
        }
    }
}

fn class_v4(ip: Ipv4Addr) -> Option<&'static str> {
    if ip.is_broadcast() {
        return Some("broadcast");
    }
    V4.iter()
        .find(|(c, _)| c.contains(IpAddr::V4(ip)))
        .map(|(_, why)| *why)
}

/// IPv4-mapped (`::ffff:a.b.c.d`), IPv4-compatible (`::a.b.c.d`) and NAT64
/// (`64:ff9b::a.b.c.d`) addresses reach the IPv4 address they carry.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let tail = Ipv4Addr::new(
        (s[6] >> 8) as u8,
        (s[6] & 0xff) as u8,
        (s[7] >> 8) as u8,
        (s[7] & 0xff) as u8,
    );
    let head = &s[..6];
    if head == [0, 0, 0, 0, 0, 0xffff] || head == [0x64, 0xff9b, 0, 0, 0, 0] {
        return Some(tail);
    }
    if head == [0, 0, 0, 0, 0, 0] && u32::from(tail) > 1 {
        return Some(tail);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(s: &str) -> Option<&'static str> {
        forbidden_class(s.parse().unwrap())
    }

    #[test]
    fn metadata_loopback_private_and_cgnat_are_refused() {
        assert_eq!(class("169.254.169.254"), Some("cloud metadata"));
        assert_eq!(class("fd00:ec2::254"), Some("cloud metadata"));
        assert_eq!(class("127.0.0.1"), Some("loopback"));
        assert_eq!(class("127.8.9.10"), Some("loopback"));
        assert_eq!(class("::1"), Some("loopback"));
        assert_eq!(class("10.1.2.3"), Some("private"));
        assert_eq!(class("172.31.255.255"), Some("private"));
        assert_eq!(class("192.168.1.1"), Some("private"));
        assert_eq!(class("fd12::1"), Some("private"));
        assert_eq!(class("100.64.0.1"), Some("CGNAT"));
        assert_eq!(class("169.254.1.1"), Some("link-local"));
        assert_eq!(class("fe80::1"), Some("link-local"));
        assert_eq!(class("0.0.0.0"), Some("unspecified"));
        assert_eq!(class("::"), Some("unspecified"));
        assert_eq!(class("255.255.255.255"), Some("broadcast"));
        assert_eq!(class("224.0.0.1"), Some("multicast"));
    }

    #[test]
    fn ipv4_hidden_in_ipv6_is_judged_as_ipv4() {
        assert_eq!(class("::ffff:127.0.0.1"), Some("loopback"));
        assert_eq!(class("::ffff:169.254.169.254"), Some("cloud metadata"));
        assert_eq!(class("64:ff9b::a9fe:a9fe"), Some("cloud metadata"));
        assert_eq!(class("::10.0.0.1"), Some("private"));
        assert_eq!(class("::ffff:8.8.8.8"), None);
    }

    #[test]
    fn public_addresses_pass() {
        for ip in [
            "8.8.8.8",
            "1.1.1.1",
            "203.0.113.10",
            "172.32.0.1",
            "2606:4700::1111",
        ] {
            assert_eq!(class(ip), None, "{ip}");
        }
    }
}
