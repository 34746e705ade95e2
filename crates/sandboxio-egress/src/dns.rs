//! The DNS messages the proxy's own resolver sends and reads (A and AAAA only; pure).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub const TYPE_A: u16 = 1;
pub const TYPE_AAAA: u16 = 28;

/// A recursive query for `name` (already validated by `target::valid_host`).
pub fn query(id: u16, name: &str, qtype: u16) -> Vec<u8> {
    let mut q = Vec::with_capacity(18 + name.len());
    q.extend_from_slice(&id.to_be_bytes());
    q.extend_from_slice(&[0x01, 0x00]); // RD
    q.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0]); // 1 question
    for label in name.split('.').filter(|l| !l.is_empty()) {
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.push(0);
    q.extend_from_slice(&qtype.to_be_bytes());
    q.extend_from_slice(&[0, 1]); // IN
    q
}

/// What an answer said.
#[derive(Debug, PartialEq, Eq)]
pub enum Answer {
    Addresses(Vec<IpAddr>),
    /// The name does not exist, or has no record of this type.
    NoData,
    /// Not an answer to our query (wrong id, not a response, truncated): ignore it.
    Foreign,
    /// The server failed (SERVFAIL, REFUSED, ...).
    Failed(u8),
}

/// Reads the A/AAAA records of an answer to query `id`.
pub fn parse(id: u16, msg: &[u8]) -> Answer {
    let Some(h) = msg.get(..12) else {
        return Answer::Foreign;
    };
    if u16::from_be_bytes([h[0], h[1]]) != id || h[2] & 0x80 == 0 {
        return Answer::Foreign;
    }
    let rcode = h[3] & 0x0f;
    match rcode {
        0 => {}
        3 => return Answer::NoData,
        r => return Answer::Failed(r),
    }
    let qd = u16::from_be_bytes([h[4], h[5]]);
    let an = u16::from_be_bytes([h[6], h[7]]);
    let mut at = 12;
    for _ in 0..qd {
        let Some(next) = skip_name(msg, at) else {
            return Answer::Foreign;
        };
        at = next + 4;
    }
    let mut out = Vec::new();
    for _ in 0..an {
        let Some(next) = skip_name(msg, at) else {
            return Answer::Foreign;
        };
        let Some(fixed) = msg.get(next..next + 10) else {
            return Answer::Foreign;
        };
        let rtype = u16::from_be_bytes([fixed[0], fixed[1]]);
        let len = usize::from(u16::from_be_bytes([fixed[8], fixed[9]]));
        let Some(data) = msg.get(next + 10..next + 10 + len) else {
            return Answer::Foreign;
        };
        match (rtype, data.len()) {
            (TYPE_A, 4) => out.push(IpAddr::V4(Ipv4Addr::new(
                data[0], data[1], data[2], data[3],
            ))),
            (TYPE_AAAA, 16) => {
                let mut b = [0u8; 16];
                b.copy_from_slice(data);
                out.push(IpAddr::V6(Ipv6Addr::from(b)));
            }
            _ => {}
        }
        at = next + 10 + len;
    }
    if out.is_empty() {
        Answer::NoData
    } else {
        Answer::Addresses(out)
    }
}

/// The offset after the name at `at` (labels, ending in a zero or a compression pointer).
fn skip_name(msg: &[u8], mut at: usize) -> Option<usize> {
    for _ in 0..128 {
        let len = *msg.get(at)?;
        match len {
            0 => return Some(at + 1),
            l if l & 0xc0 == 0xc0 => {
                msg.get(at + 1)?;
                return Some(at + 2);
            }
            l => at += 1 + usize::from(l),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(id: u16, name: &str, records: &[(u16, &[u8])]) -> Vec<u8> {
        let mut m = query(id, name, TYPE_A);
        m[2] = 0x81;
        m[3] = 0x80;
        m[7] = records.len() as u8;
        for (t, data) in records {
            m.extend_from_slice(&[0xc0, 12]);
            m.extend_from_slice(&t.to_be_bytes());
            m.extend_from_slice(&[0, 1, 0, 0, 0, 60]);
            m.extend_from_slice(&(data.len() as u16).to_be_bytes());
            m.extend_from_slice(data);
        }
        m
    }

    #[test]
    fn queries_carry_the_name_as_labels() {
        let q = query(7, "a.example", TYPE_AAAA);
        assert_eq!(&q[..2], &[0, 7]);
        assert_eq!(&q[12..], b"\x01a\x07example\x00\x00\x1c\x00\x01");
    }

    #[test]
    fn answers_yield_a_and_aaaa_records() {
        let v6 = [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        let m = answer(
            9,
            "x.test",
            &[
                (TYPE_A, &[203, 0, 113, 10]),
                (5, b"\x01y\x00"),
                (TYPE_AAAA, &v6),
            ],
        );
        assert_eq!(
            parse(9, &m),
            Answer::Addresses(vec![
                "203.0.113.10".parse().unwrap(),
                "2001:db8::1".parse().unwrap()
            ])
        );
    }

    #[test]
    fn foreign_truncated_and_failed_answers_are_told_apart() {
        let m = answer(9, "x.test", &[(TYPE_A, &[1, 2, 3, 4])]);
        assert_eq!(parse(10, &m), Answer::Foreign);
        assert_eq!(parse(9, &m[..m.len() - 2]), Answer::Foreign);
        let mut nx = m.clone();
        nx[3] = 0x83;
        assert_eq!(parse(9, &nx), Answer::NoData);
        let mut fail = m;
        fail[3] = 0x82;
        assert_eq!(parse(9, &fail), Answer::Failed(2));
        assert_eq!(parse(9, &[]), Answer::Foreign);
    }
}
