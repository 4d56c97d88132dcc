//! Outbound calls fenced: which addresses berth may connect to on a user's or an agent's say.
//! Pure, so every range is unit-tested here.
//!
//! - Webhooks ([`WebhookPolicy`]): a user names the URL, so without a fence berth would POST
//!   into its own network (the Docker socket, the cloud metadata address, an internal admin
//!   API). Loopback, private, link-local, shared (CGNAT), unique-local, multicast,
//!   unspecified and reserved addresses, and the IPv6 forms that carry such an IPv4 address
//!   (IPv4-mapped, IPv4-compatible, NAT64, 6to4), are refused unless the operator's allow-list
//!   (`BERTH_WEBHOOK_ALLOW`) admits them. The notification service checks every address a
//!   name resolves to when it delivers, and connects only to those it checked.
//! - Agents ([`check_agent_address`]): an agent names the address its published ports are
//!   reached at, which the app proxy dials. Agents live on loopback and private networks, so
//!   those stay allowed; what no agent's host can be (unspecified, multicast, broadcast,
//!   reserved, link-local with the cloud metadata address) is refused.
//!
//! CIDR ranges are parsed and matched here by hand ([`Cidr`]): this crate takes no dependency
//! beyond serde, chrono, uuid and thiserror (the tidy test), and a prefix match is a mask.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// A range of addresses: an address and how many of its leading bits are fixed
/// (`10.0.0.0/8`, `::1/128`; a bare address is its own range).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

/// Why a text is not a CIDR range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not an address range such as 10.0.0.0/8, 127.0.0.1/32 or fd00::/8")]
pub struct BadCidr(pub String);

impl Cidr {
    /// The range of `network`'s first `prefix` bits (bits after them are cleared).
    pub fn new(network: IpAddr, prefix: u8) -> Option<Cidr> {
        let bits = match network {
            IpAddr::V4(_) => 32,
            IpAddr::V6(_) => 128,
        };
        (prefix <= bits).then(|| Cidr {
            network: mask(network, prefix),
            prefix,
        })
    }

    /// Whether `ip` is in the range (an IPv4 range holds no IPv6 address, and the reverse).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.network, ip) {
            (IpAddr::V4(_), IpAddr::V4(_)) | (IpAddr::V6(_), IpAddr::V6(_)) => {
                mask(ip, self.prefix) == self.network
            }
            _ => false,
        }
    }
}

fn mask(ip: IpAddr, prefix: u8) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => {
            let keep = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V4(Ipv4Addr::from(u32::from(v4) & keep))
        }
        IpAddr::V6(v6) => {
            let keep = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(u128::from(v6) & keep))
        }
    }
}

impl FromStr for Cidr {
    type Err = BadCidr;

    fn from_str(s: &str) -> Result<Cidr, BadCidr> {
        let bad = || BadCidr(s.to_owned());
        let (address, prefix) = match s.trim().split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s.trim(), None),
        };
        let network: IpAddr = address.parse().map_err(|_| bad())?;
        let prefix = match prefix {
            Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => {
                p.parse().map_err(|_| bad())?
            }
            Some(_) => return Err(bad()),
            None if network.is_ipv4() => 32,
            None => 128,
        };
        Cidr::new(network, prefix).ok_or_else(bad)
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

/// A list of ranges as an operator writes it: comma- or space-separated CIDRs (empty: none).
pub fn parse_cidrs(list: &str) -> Result<Vec<Cidr>, BadCidr> {
    list.split([',', ' ', '\t', '\n'])
        .filter(|s| !s.is_empty())
        .map(str::parse)
        .collect()
}

/// What kind of address a refused one is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Unspecified,
    Loopback,
    Private,
    LinkLocal,
    /// 100.64.0.0/10, carrier-grade NAT.
    Shared,
    UniqueLocal,
    Multicast,
    /// Set aside (IETF protocol assignments, benchmarking, 240.0.0.0/4 with the broadcast
    /// address, IPv6's discard prefix).
    Reserved,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Unspecified => "unspecified",
            Kind::Loopback => "loopback",
            Kind::Private => "private",
            Kind::LinkLocal => "link-local (the cloud metadata address is one)",
            Kind::Shared => "shared (carrier-grade NAT)",
            Kind::UniqueLocal => "unique-local",
            Kind::Multicast => "multicast",
            Kind::Reserved => "reserved",
        }
    }
}

/// The ranges no user's webhook reaches unless the operator admits them, and their kinds.
/// IPv6 forms that carry an IPv4 address are judged by that address ([`embedded_v4`]).
const REFUSED: &[(&str, Kind)] = &[
    ("0.0.0.0/8", Kind::Unspecified),
    ("10.0.0.0/8", Kind::Private),
    ("100.64.0.0/10", Kind::Shared),
    ("127.0.0.0/8", Kind::Loopback),
    ("169.254.0.0/16", Kind::LinkLocal),
    ("172.16.0.0/12", Kind::Private),
    ("192.0.0.0/24", Kind::Reserved),
    ("192.168.0.0/16", Kind::Private),
    ("198.18.0.0/15", Kind::Reserved),
    ("224.0.0.0/4", Kind::Multicast),
    ("240.0.0.0/4", Kind::Reserved),
    ("::/128", Kind::Unspecified),
    ("::1/128", Kind::Loopback),
    ("100::/64", Kind::Reserved),
    ("fc00::/7", Kind::UniqueLocal),
    ("fe80::/10", Kind::LinkLocal),
    // Site-local, deprecated, still routed inside some networks.
    ("fec0::/10", Kind::Private),
    ("ff00::/8", Kind::Multicast),
];

/// The kind of special range `ip` is in, judging an IPv6 address that carries an IPv4 one
/// by that IPv4 address; `None` for an ordinary (public) address.
pub fn special_kind(ip: IpAddr) -> Option<Kind> {
    let own = REFUSED
        .iter()
        .find(|(range, _)| {
            range
                .parse::<Cidr>()
                .expect("a range of the table")
                .contains(ip)
        })
        .map(|(_, kind)| *kind);
    own.or_else(|| match ip {
        IpAddr::V6(v6) => embedded_v4(v6).and_then(|v4| special_kind(IpAddr::V4(v4))),
        IpAddr::V4(_) => None,
    })
}

/// The IPv4 address an IPv6 one carries, if it is of a form that does: IPv4-mapped
/// (`::ffff:a.b.c.d`), IPv4-compatible (`::a.b.c.d`, deprecated), NAT64's well-known prefix
/// (`64:ff9b::a.b.c.d`) and 6to4 (`2002:aabb:ccdd::`). A connection to one of these may reach
/// the IPv4 address.
pub fn embedded_v4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = v6.segments();
    let last = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    match s {
        [0, 0, 0, 0, 0, 0xffff, _, _] | [0, 0, 0, 0, 0, 0, _, _] => Some(last),
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => Some(last),
        [0x2002, hi, lo, ..] => Some(Ipv4Addr::new(
            (hi >> 8) as u8,
            hi as u8,
            (lo >> 8) as u8,
            lo as u8,
        )),
        _ => None,
    }
}

/// An address a webhook may not be delivered to, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{address} is a {} address, which webhooks do not reach unless the operator admits it (BERTH_WEBHOOK_ALLOW)", kind.as_str())]
pub struct RefusedAddress {
    pub address: IpAddr,
    pub kind: Kind,
}

/// Where webhooks may be delivered: every public address, and the special ranges
/// ([`special_kind`]) only where the operator's `allow` list admits them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WebhookPolicy {
    pub allow: Vec<Cidr>,
}

impl WebhookPolicy {
    /// Whether a webhook may be delivered to `ip`. An IPv6 address that carries an IPv4 one
    /// is admitted by a range holding either.
    pub fn check(&self, ip: IpAddr) -> Result<(), RefusedAddress> {
        let carried = match ip {
            IpAddr::V6(v6) => embedded_v4(v6).map(IpAddr::V4),
            IpAddr::V4(_) => None,
        };
        let admitted = self
            .allow
            .iter()
            .any(|range| range.contains(ip) || carried.is_some_and(|v4| range.contains(v4)));
        match special_kind(ip) {
            Some(kind) if !admitted => Err(RefusedAddress { address: ip, kind }),
            _ => Ok(()),
        }
    }
}

/// An address an agent named that the app proxy will not dial.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{address}` cannot be an agent's address: {why}")]
pub struct BadAgentAddress {
    pub address: String,
    pub why: &'static str,
}

/// Whether the proxy may dial `address`, which an agent said its published ports are on:
/// an IP address that a host can have. Loopback (one machine) and private networks are
/// where agents live; unspecified, multicast, reserved and link-local addresses (the cloud
/// metadata address among them), directly or carried in IPv6, are not an agent's.
pub fn check_agent_address(address: &str) -> Result<IpAddr, BadAgentAddress> {
    let bad = |why| BadAgentAddress {
        address: address.to_owned(),
        why,
    };
    let ip: IpAddr = address.parse().map_err(|_| bad("not an IP address"))?;
    match special_kind(ip) {
        Some(kind @ (Kind::Unspecified | Kind::Multicast | Kind::Reserved | Kind::LinkLocal)) => {
            Err(bad(kind.as_str()))
        }
        _ => Ok(ip),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn refused(policy: &WebhookPolicy, s: &str) -> Option<Kind> {
        policy.check(ip(s)).err().map(|e| e.kind)
    }

    #[test]
    fn every_special_ipv4_range_is_refused_by_default() {
        let p = WebhookPolicy::default();
        for (address, kind) in [
            ("0.0.0.0", Kind::Unspecified),
            ("0.1.2.3", Kind::Unspecified),
            ("10.0.0.1", Kind::Private),
            ("10.255.255.255", Kind::Private),
            ("100.64.0.1", Kind::Shared),
            ("100.127.255.254", Kind::Shared),
            ("127.0.0.1", Kind::Loopback),
            ("127.1.2.3", Kind::Loopback),
            ("169.254.169.254", Kind::LinkLocal),
            ("169.254.0.1", Kind::LinkLocal),
            ("172.16.0.1", Kind::Private),
            ("172.31.255.255", Kind::Private),
            ("192.0.0.8", Kind::Reserved),
            ("192.168.1.1", Kind::Private),
            ("198.18.0.1", Kind::Reserved),
            ("198.19.255.255", Kind::Reserved),
            ("224.0.0.1", Kind::Multicast),
            ("239.255.255.250", Kind::Multicast),
            ("240.0.0.1", Kind::Reserved),
            ("255.255.255.255", Kind::Reserved),
        ] {
            assert_eq!(refused(&p, address), Some(kind), "{address}");
        }
    }

    #[test]
    fn public_addresses_next_to_the_special_ranges_are_admitted() {
        let p = WebhookPolicy::default();
        for address in [
            "1.1.1.1",
            "8.8.8.8",
            "9.255.255.255",
            "11.0.0.0",
            "100.63.255.255",
            "100.128.0.0",
            "126.255.255.255",
            "128.0.0.0",
            "169.253.255.255",
            "169.255.0.0",
            "172.15.255.255",
            "172.32.0.0",
            "192.167.255.255",
            "192.169.0.0",
            "198.17.255.255",
            "198.20.0.0",
            "223.255.255.255",
            "2001:4860:4860::8888",
            "2606:4700:4700::1111",
        ] {
            assert_eq!(refused(&p, address), None, "{address}");
        }
    }

    #[test]
    fn every_special_ipv6_range_is_refused_by_default() {
        let p = WebhookPolicy::default();
        for (address, kind) in [
            ("::", Kind::Unspecified),
            ("::1", Kind::Loopback),
            ("fe80::1", Kind::LinkLocal),
            ("febf::1", Kind::LinkLocal),
            ("fc00::1", Kind::UniqueLocal),
            ("fd12:3456::1", Kind::UniqueLocal),
            ("fec0::1", Kind::Private),
            ("ff02::1", Kind::Multicast),
            ("100::1", Kind::Reserved),
        ] {
            assert_eq!(refused(&p, address), Some(kind), "{address}");
        }
    }

    #[test]
    fn ipv6_forms_carrying_a_refused_ipv4_address_are_refused() {
        let p = WebhookPolicy::default();
        for (address, kind) in [
            ("::ffff:127.0.0.1", Kind::Loopback),
            ("::ffff:7f00:1", Kind::Loopback),
            ("::ffff:169.254.169.254", Kind::LinkLocal),
            ("::ffff:10.0.0.1", Kind::Private),
            ("::ffff:100.64.0.1", Kind::Shared),
            ("::ffff:0.0.0.0", Kind::Unspecified),
            ("::127.0.0.1", Kind::Loopback),
            ("::192.168.0.1", Kind::Private),
            ("64:ff9b::169.254.169.254", Kind::LinkLocal),
            ("64:ff9b::7f00:1", Kind::Loopback),
            ("2002:7f00:1::", Kind::Loopback),
            ("2002:a9fe:a9fe::1", Kind::LinkLocal),
        ] {
            assert_eq!(refused(&p, address), Some(kind), "{address}");
        }
        // The same forms of a public address are admitted.
        for address in ["::ffff:8.8.8.8", "64:ff9b::808:808", "2002:808:808::1"] {
            assert_eq!(refused(&p, address), None, "{address}");
        }
    }

    #[test]
    fn the_allow_list_admits_its_ranges_and_nothing_else() {
        let p = WebhookPolicy {
            allow: parse_cidrs("127.0.0.1/32, 10.1.0.0/16 fd00::/8").unwrap(),
        };
        for address in [
            "127.0.0.1",
            "10.1.2.3",
            "fd00::1",
            "::ffff:127.0.0.1",
            "64:ff9b::a01:203",
        ] {
            assert_eq!(refused(&p, address), None, "{address} is admitted");
        }
        for (address, kind) in [
            ("127.0.0.2", Kind::Loopback),
            ("::1", Kind::Loopback),
            ("10.2.0.1", Kind::Private),
            ("169.254.169.254", Kind::LinkLocal),
            ("fc00::1", Kind::UniqueLocal),
        ] {
            assert_eq!(refused(&p, address), Some(kind), "{address} stays refused");
        }
        // A refusal says what the address is and where to admit it.
        let why = WebhookPolicy::default()
            .check(ip("169.254.169.254"))
            .unwrap_err()
            .to_string();
        assert!(
            why.contains("link-local") && why.contains("BERTH_WEBHOOK_ALLOW"),
            "{why}"
        );
    }

    #[test]
    fn ranges_parse_as_operators_write_them() {
        assert_eq!(parse_cidrs("").unwrap(), vec![]);
        let parsed = parse_cidrs("127.0.0.1,10.9.8.7/8 ::1").unwrap();
        let shown: Vec<String> = parsed.iter().map(Cidr::to_string).collect();
        assert_eq!(shown, ["127.0.0.1/32", "10.0.0.0/8", "::1/128"]);
        for bad in [
            "10.0.0.0/33",
            "::/129",
            "10.0.0.0/",
            "10.0.0/8",
            "localhost",
            "1.2.3.4/-1",
            "1.2.3.4/+8",
        ] {
            assert_eq!(parse_cidrs(bad), Err(BadCidr(bad.to_owned())), "{bad}");
        }
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains(ip("203.0.113.9")) && !all.contains(ip("::1")));
        let v6all: Cidr = "::/0".parse().unwrap();
        assert!(v6all.contains(ip("2001:db8::1")) && !v6all.contains(ip("1.2.3.4")));
    }

    #[test]
    fn agents_are_dialled_on_loopback_private_and_public_addresses_only() {
        for good in [
            "127.0.0.1",
            "10.0.0.5",
            "192.168.1.20",
            "172.17.0.1",
            "203.0.113.7",
            "::1",
            "fd00::5",
        ] {
            assert_eq!(check_agent_address(good), Ok(ip(good)), "{good}");
        }
        for (bad, why) in [
            ("169.254.169.254", "link-local"),
            ("::ffff:169.254.169.254", "link-local"),
            ("fe80::1", "link-local"),
            ("0.0.0.0", "unspecified"),
            ("::", "unspecified"),
            ("224.0.0.1", "multicast"),
            ("255.255.255.255", "reserved"),
            ("metadata.google.internal", "not an IP address"),
            ("", "not an IP address"),
        ] {
            let refused = check_agent_address(bad).unwrap_err();
            assert!(refused.why.starts_with(why), "{bad}: {refused}");
        }
    }
}
