//! Address blocks (`10.0.0.0/8`, `fd00::/8`, or one address).

use std::net::IpAddr;

use crate::error::EgressError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl Cidr {
    pub fn parse(input: &str) -> Result<Cidr, EgressError> {
        let bad = |why| EgressError::InvalidCidr {
            input: input.to_string(),
            why,
        };
        let (a, p) = match input.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (input, None),
        };
        let addr: IpAddr = a
            .trim_matches(|c| c == '[' || c == ']')
            .parse()
            .map_err(|_| bad("not an IP address"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match p {
            None => max,
            Some(p) => p.parse::<u8>().map_err(|_| bad("bad prefix length"))?,
        };
        if prefix > max {
            return Err(bad("prefix longer than the address"));
        }
        Ok(Cidr { addr, prefix })
    }

    pub const fn v4(a: u8, b: u8, c: u8, d: u8, prefix: u8) -> Cidr {
        Cidr {
            addr: IpAddr::V4(std::net::Ipv4Addr::new(a, b, c, d)),
            prefix,
        }
    }

    pub const fn v6(segments: [u16; 8], prefix: u8) -> Cidr {
        let [a, b, c, d, e, f, g, h] = segments;
        Cidr {
            addr: IpAddr::V6(std::net::Ipv6Addr::new(a, b, c, d, e, f, g, h)),
            prefix,
        }
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(n), IpAddr::V4(x)) => {
                let mask = mask32(self.prefix);
                u32::from(n) & mask == u32::from(x) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(x)) => {
                let mask = mask128(self.prefix);
                u128::from(n) & mask == u128::from(x) & mask
            }
            _ => false,
        }
    }
}

fn mask32(prefix: u8) -> u32 {
    if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(prefix))
    }
}

fn mask128(prefix: u8) -> u128 {
    if prefix == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(prefix))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_contain_their_addresses_only() {
        let c = Cidr::parse("10.0.0.0/8").unwrap();
        assert!(c.contains("10.255.1.2".parse().unwrap()));
        assert!(!c.contains("11.0.0.1".parse().unwrap()));
        assert!(!c.contains("::ffff:10.0.0.1".parse().unwrap()));
        let one = Cidr::parse("127.0.0.1").unwrap();
        assert!(one.contains("127.0.0.1".parse().unwrap()));
        assert!(!one.contains("127.0.0.2".parse().unwrap()));
        let v6 = Cidr::parse("fd00::/8").unwrap();
        assert!(v6.contains("fd00:ec2::254".parse().unwrap()));
        assert!(Cidr::parse("0.0.0.0/0")
            .unwrap()
            .contains("8.8.8.8".parse().unwrap()));
    }

    #[test]
    fn bad_blocks_are_errors() {
        for bad in ["10.0.0.0/33", "x", "10.0.0/8", "::/129", "1.2.3.4/-1"] {
            assert!(Cidr::parse(bad).is_err(), "{bad}");
        }
    }
}
