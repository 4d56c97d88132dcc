//! The apps a session offers and the proxy circuits that reach them, pure.
//!
//! An image declares its apps in a label (berth's `ai.berth.service-ports`, or Backend.AI's
//! `ai.backend.service-ports`, same grammar: `name:protocol:port` or `name:protocol:[p1,p2]`,
//! comma-separated). Every session also has the terminal, which needs no label, and the
//! preopen ports its request named. A circuit is one opening of an app through berth's proxy:
//! a port of the proxy's pool, who may pass, and until when.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The labels an image declares its apps in, berth's first.
pub const SERVICE_PORTS_LABELS: [&str; 2] = ["ai.berth.service-ports", "ai.backend.service-ports"];

/// The terminal's app name (Backend.AI's, so clients that know it find it).
pub const TERMINAL: &str = "ttyd";

/// The terminal's port as the session's apps name it (ttyd's, reserved for it). Nothing
/// listens on it inside the container: the agent serves the terminal itself, on a port of its
/// own that it reports as this one's host port.
pub const TERMINAL_PORT: u16 = 7681;

/// The SSH server's app name (Backend.AI's): Debian's dropbear, when the image has it,
/// reached through a raw TCP circuit.
pub const SSH: &str = "sshd";

/// The container port the SSH server listens on (Backend.AI's, reserved for it).
pub const SSH_PORT: u16 = 2200;

/// Container ports neither an image's app nor a preopen port may take: Backend.AI's REPL
/// ports (2000-2003), SSH (2200) and terminal (7681), kept free so that an image made for
/// either platform runs on both.
pub const RESERVED_PORTS: [u16; 6] = [2000, 2001, 2002, 2003, 2200, 7681];

/// How an app is spoken to.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum AppProtocol {
    /// HTTP and WebSocket, through the proxy's HTTP door.
    Http,
    /// Raw TCP.
    Tcp,
    /// A port the user serves on themselves; proxied as HTTP.
    Preopen,
    Vnc,
    Rdp,
    /// The terminal: a shell in the main kernel over a WebSocket (ttyd's protocol), through
    /// the proxy's HTTP door like any web app.
    Pty,
}

impl AppProtocol {
    fn parse(text: &str) -> Option<AppProtocol> {
        Some(match text {
            "http" => AppProtocol::Http,
            "tcp" => AppProtocol::Tcp,
            "preopen" => AppProtocol::Preopen,
            "vnc" => AppProtocol::Vnc,
            "rdp" => AppProtocol::Rdp,
            "pty" => AppProtocol::Pty,
            _ => return None,
        })
    }

    /// Whether the proxy speaks HTTP (and WebSocket) to it; every other app is carried as
    /// raw TCP.
    pub fn is_http(self) -> bool {
        matches!(
            self,
            AppProtocol::Http | AppProtocol::Preopen | AppProtocol::Pty
        )
    }
}

/// One app an image declares: its name, protocol and container ports (the first is the one
/// opened unless another is asked for).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ServicePort {
    pub name: String,
    pub protocol: AppProtocol,
    pub ports: Vec<u16>,
}

/// Why an image's service-ports label cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("service-ports label, entry {entry}: {reason}")]
pub struct LabelError {
    /// The entry's place in the label, from 0.
    pub entry: usize,
    pub reason: String,
}

/// Reads a service-ports label. `pty` entries are skipped (the terminal is berth's own);
/// every port must be in 1025..=65534, unreserved, and used once; every name once.
pub fn parse_service_ports(label: &str) -> Result<Vec<ServicePort>, LabelError> {
    let mut apps: Vec<ServicePort> = Vec::new();
    let mut seen_ports = BTreeSet::new();
    for (entry, item) in split_top_level(label).into_iter().enumerate() {
        let fail = |reason: String| LabelError { entry, reason };
        let item = item.trim();
        if item.is_empty() {
            continue;
        }
        let mut parts = item.splitn(3, ':');
        let (Some(name), Some(protocol), Some(ports)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(fail(format!("`{item}` is not name:protocol:port")));
        };
        let name = name.trim();
        if name.is_empty()
            || name.len() > 64
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(fail(format!(
                "app name `{name}` must be 1 to 64 letters, digits, - or _"
            )));
        }
        let protocol = AppProtocol::parse(protocol.trim())
            .ok_or_else(|| fail(format!("unknown protocol `{}`", protocol.trim())))?;
        let ports = ports.trim();
        let ports: Vec<&str> = match ports.strip_prefix('[').and_then(|p| p.strip_suffix(']')) {
            Some(list) => list.split(',').collect(),
            None => vec![ports],
        };
        let mut numbers = Vec::with_capacity(ports.len());
        for port in ports {
            let port: u16 = port
                .trim()
                .parse()
                .map_err(|_| fail(format!("`{}` is not a port", port.trim())))?;
            if !(1025..=65534).contains(&port) {
                return Err(fail(format!("port {port} is not in 1025 to 65534")));
            }
            if RESERVED_PORTS.contains(&port) {
                return Err(fail(format!("port {port} is reserved")));
            }
            if !seen_ports.insert(port) {
                return Err(fail(format!("port {port} is used twice")));
            }
            numbers.push(port);
        }
        if protocol == AppProtocol::Pty {
            continue;
        }
        if apps.iter().any(|a| a.name == name) || name == TERMINAL {
            return Err(fail(format!("app name `{name}` is used twice")));
        }
        apps.push(ServicePort {
            name: name.to_owned(),
            protocol,
            ports: numbers,
        });
    }
    Ok(apps)
}

/// Splits on the commas outside brackets.
fn split_top_level(text: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in text.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

/// The apps an image declares, from its labels (berth's label wins over Backend.AI's).
pub fn image_apps<'a>(
    label: impl Fn(&str) -> Option<&'a str>,
) -> Result<Vec<ServicePort>, LabelError> {
    SERVICE_PORTS_LABELS
        .iter()
        .find_map(|name| label(name))
        .map_or(Ok(Vec::new()), parse_service_ports)
}

/// Why preopen ports cannot go with an image: the index of the port and the reason.
pub fn check_preopen(preopen: &[u16], image_apps: &[ServicePort]) -> Result<(), (usize, String)> {
    for (i, port) in preopen.iter().enumerate() {
        if RESERVED_PORTS.contains(port) {
            return Err((i, format!("{port} is reserved for berth's own services")));
        }
        if let Some(app) = image_apps.iter().find(|a| a.ports.contains(port)) {
            return Err((
                i,
                format!(
                    "{port} is the image's app `{}`; open that app instead",
                    app.name
                ),
            ));
        }
    }
    Ok(())
}

/// One app a session offers, as its detail lists it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SessionApp {
    /// `ttyd` for the terminal, the image's name for its apps, the port for a preopen port.
    pub name: String,
    pub protocol: AppProtocol,
    /// Container ports.
    pub ports: Vec<u16>,
}

/// The apps berth itself gives every interactive session: the terminal, and the SSH server
/// (which answers only when the image ships one).
fn intrinsic_apps() -> [SessionApp; 2] {
    [
        SessionApp {
            name: TERMINAL.to_owned(),
            protocol: AppProtocol::Pty,
            ports: vec![TERMINAL_PORT],
        },
        SessionApp {
            name: SSH.to_owned(),
            protocol: AppProtocol::Tcp,
            ports: vec![SSH_PORT],
        },
    ]
}

/// Every app of a session: the terminal and the SSH server (an interactive session's), the
/// image's apps, then each preopen port.
pub fn session_apps(
    image_apps: &[ServicePort],
    preopen: &[u16],
    interactive: bool,
) -> Vec<SessionApp> {
    let declared = image_apps.iter().map(|a| SessionApp {
        name: a.name.clone(),
        protocol: a.protocol,
        ports: a.ports.clone(),
    });
    let preopen = preopen.iter().map(|p| SessionApp {
        name: p.to_string(),
        protocol: AppProtocol::Preopen,
        ports: vec![*p],
    });
    let intrinsic = if interactive {
        intrinsic_apps().to_vec()
    } else {
        Vec::new()
    };
    intrinsic
        .into_iter()
        .chain(declared)
        .chain(preopen)
        .collect()
}

/// Every container port a session's main kernel publishes through the engine: the SSH
/// server's (an interactive session's; each published port costs the engine a proxy
/// process), its image's apps' and its preopen ports. The terminal's is not among them: the
/// agent serves it ([`TERMINAL_PORT`]).
pub fn published_ports(image_apps: &[ServicePort], preopen: &[u16], interactive: bool) -> Vec<u16> {
    let mut ports: Vec<u16> = image_apps
        .iter()
        .flat_map(|a| a.ports.iter().copied())
        .chain(preopen.iter().copied())
        .chain(interactive.then_some(SSH_PORT))
        .collect();
    ports.sort_unstable();
    ports.dedup();
    ports
}

/// A client address range allowed through a circuit: an address, or `address/prefix`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(try_from = "String", into = "String")]
pub struct AddressRange {
    pub address: IpAddr,
    pub prefix: u8,
}

/// Text that is not an [`AddressRange`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadAddressRange {
    #[error("`{0}` is not an address or address/prefix")]
    NotAnAddress(String),
    #[error("`{text}`: the prefix must be 0 to {most}")]
    Prefix { text: String, most: u8 },
}

impl TryFrom<String> for AddressRange {
    type Error = BadAddressRange;
    fn try_from(text: String) -> Result<Self, BadAddressRange> {
        let (address, prefix) = match text.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (text.as_str(), None),
        };
        let address: IpAddr = address
            .trim()
            .parse()
            .map_err(|_| BadAddressRange::NotAnAddress(text.clone()))?;
        let most = if address.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => most,
            Some(p) => p
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= most)
                .ok_or_else(|| BadAddressRange::Prefix {
                    text: text.clone(),
                    most,
                })?,
        };
        Ok(AddressRange { address, prefix })
    }
}

impl From<AddressRange> for String {
    fn from(range: AddressRange) -> String {
        format!("{}/{}", range.address, range.prefix)
    }
}

impl AddressRange {
    /// Whether `client` is in the range (an IPv4 client seen as IPv6-mapped counts as IPv4).
    pub fn contains(&self, client: IpAddr) -> bool {
        let client = match client {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(client, IpAddr::V4),
            v4 => v4,
        };
        match (self.address, client) {
            (IpAddr::V4(net), IpAddr::V4(c)) => {
                let mask = u32::MAX.checked_shl(32 - self.prefix as u32).unwrap_or(0);
                u32::from(net) & mask == u32::from(c) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(c)) => {
                let mask = u128::MAX.checked_shl(128 - self.prefix as u32).unwrap_or(0);
                u128::from(net) & mask == u128::from(c) & mask
            }
            _ => false,
        }
    }
}

/// Who may pass through a circuit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Admission {
    /// Anyone who reaches the port, not only the session's owner.
    pub public: bool,
    /// When not empty, only clients in one of these ranges.
    #[serde(default)]
    pub allowed: Vec<AddressRange>,
}

impl Admission {
    /// Whether a client at `client` may reach the circuit at all (before any cookie).
    pub fn admits_address(&self, client: IpAddr) -> bool {
        self.allowed.is_empty() || self.allowed.iter().any(|r| r.contains(client))
    }
}

/// The port a new circuit listens on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortChoice {
    pub port: u16,
    /// Whether it is the port the user preferred (false also when none was asked for).
    pub preferred_honoured: bool,
}

/// Every port of the pool is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("all {size} ports of the proxy's pool ({first}-{last}) are taken (by open circuits, or by other programs on the proxy's host)")]
pub struct PoolExhausted {
    pub first: u16,
    pub last: u16,
    pub size: usize,
}

/// Chooses a circuit's port from `pool`, avoiding `taken`: the preferred one when it is in
/// the pool and free, otherwise the free port `random` lands on (the seed promises a random
/// free port, and says so, rather than a refusal).
pub fn choose_port(
    pool: (u16, u16),
    taken: &BTreeSet<u16>,
    preferred: Option<u16>,
    random: u64,
) -> Result<PortChoice, PoolExhausted> {
    let (first, last) = pool;
    let free = |p: &u16| !taken.contains(p);
    if let Some(p) = preferred.filter(|p| (first..=last).contains(p) && free(p)) {
        return Ok(PortChoice {
            port: p,
            preferred_honoured: true,
        });
    }
    let free_ports: Vec<u16> = (first..=last).filter(free).collect();
    if free_ports.is_empty() {
        return Err(PoolExhausted {
            first,
            last,
            size: (last as usize + 1).saturating_sub(first as usize),
        });
    }
    Ok(PortChoice {
        port: free_ports[(random % free_ports.len() as u64) as usize],
        preferred_honoured: false,
    })
}

/// Why a circuit closed.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum CircuitCloseReason {
    /// Its owner (or an admin) closed it.
    Requested,
    /// Its session ended.
    SessionEnded,
    /// Nothing passed through it for the proxy's idle timeout.
    Idle,
    /// Its session's owner was disabled (`UserDisabled`).
    OwnerDisabled,
}

/// Whether a circuit has sat idle long enough to close: no connection open through it and no
/// byte through it for `timeout`. An open connection keeps it (a terminal left open with
/// nothing typed is still somebody's), unlike the idle-reaper, which counts bytes alone.
pub fn circuit_is_idle(open_connections: usize, quiet_for: Duration, timeout: Duration) -> bool {
    open_connections == 0 && quiet_for >= timeout
}

/// Whether an open circuit can serve a new request to open the same app: same session,
/// app, port and admission.
pub fn reusable(
    open: &crate::payloads::AppCircuitOpened,
    session_id: Uuid,
    app: &str,
    container_port: u16,
    admission: &Admission,
) -> bool {
    open.session_id == session_id
        && open.app == app
        && open.container_port == container_port
        && open.admission == *admission
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_label_lists_apps_with_one_or_several_ports() {
        let apps =
            parse_service_ports("jupyter:http:8888, tb:http:[6006,6007],ssh2:tcp:2222").unwrap();
        assert_eq!(apps.len(), 3);
        assert_eq!(apps[0].name, "jupyter");
        assert_eq!(apps[0].ports, vec![8888]);
        assert_eq!(apps[1].ports, vec![6006, 6007]);
        assert_eq!(apps[2].protocol, AppProtocol::Tcp);
    }

    #[test]
    fn a_label_is_refused_with_the_entry_that_is_wrong() {
        let bad = |label: &str| parse_service_ports(label).unwrap_err();
        assert_eq!(bad("a:http:8888,b:ftp:9000").entry, 1);
        assert!(bad("a:http:2200").reason.contains("reserved"));
        assert!(bad("a:http:80").reason.contains("1025"));
        assert!(bad("a:http:8888,b:http:8888").reason.contains("twice"));
        assert!(bad("a:http:8888,a:http:8889").reason.contains("twice"));
        assert!(bad("a:http").reason.contains("name:protocol:port"));
        assert!(bad("a b:http:8888").reason.contains("app name"));
    }

    #[test]
    fn pty_entries_are_skipped_and_berths_label_wins() {
        assert!(parse_service_ports("term:pty:7000").unwrap().is_empty());
        let labels = [
            ("ai.backend.service-ports", "old:http:9000"),
            ("ai.berth.service-ports", "new:http:9001"),
        ];
        let get = |n: &str| labels.iter().find(|(k, _)| *k == n).map(|(_, v)| *v);
        assert_eq!(image_apps(get).unwrap()[0].name, "new");
        let backend_only = |n: &str| (n == "ai.backend.service-ports").then_some("old:http:9000");
        assert_eq!(image_apps(backend_only).unwrap()[0].name, "old");
        assert!(image_apps(|_| None).unwrap().is_empty());
    }

    #[test]
    fn a_preopen_port_may_not_take_an_apps_or_a_reserved_port() {
        let apps = parse_service_ports("jupyter:http:8888").unwrap();
        assert_eq!(check_preopen(&[8080, 8888], &apps).unwrap_err().0, 1);
        assert!(check_preopen(&[7681], &apps)
            .unwrap_err()
            .1
            .contains("reserved"));
        assert!(check_preopen(&[8080, 9000], &apps).is_ok());
    }

    #[test]
    fn a_session_lists_the_terminal_the_ssh_server_its_images_apps_and_its_preopen_ports() {
        let apps = parse_service_ports("jupyter:http:8888").unwrap();
        let listed = session_apps(&apps, &[8080], true);
        let names: Vec<&str> = listed.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(names, ["ttyd", "sshd", "jupyter", "8080"]);
        assert_eq!(listed[0].ports, vec![TERMINAL_PORT]);
        assert_eq!(
            (listed[1].protocol, listed[1].ports.clone()),
            (AppProtocol::Tcp, vec![SSH_PORT])
        );
        assert!(!listed[1].protocol.is_http(), "carried as raw TCP");
        assert_eq!(
            published_ports(&apps, &[8080, 8888], true),
            vec![2200, 8080, 8888],
            "the terminal's is the agent's own"
        );
        assert_eq!(
            published_ports(&apps, &[], false),
            vec![8888],
            "a batch session's"
        );
        assert_eq!(session_apps(&apps, &[], false)[0].name, "jupyter");
    }

    #[test]
    fn the_preferred_port_is_taken_when_free_otherwise_a_free_one_and_it_says_so() {
        let taken = BTreeSet::from([10201]);
        let pool = (10200, 10203);
        let honoured = choose_port(pool, &taken, Some(10202), 0).unwrap();
        assert_eq!((honoured.port, honoured.preferred_honoured), (10202, true));
        let replaced = choose_port(pool, &taken, Some(10201), 1).unwrap();
        assert!(!replaced.preferred_honoured);
        assert_ne!(replaced.port, 10201);
        let outside = choose_port(pool, &taken, Some(80), 5).unwrap();
        assert!(!outside.preferred_honoured && (10200..=10203).contains(&outside.port));
        let full = BTreeSet::from([10200, 10201, 10202, 10203]);
        assert_eq!(choose_port(pool, &full, None, 0).unwrap_err().size, 4);
    }

    #[test]
    fn a_circuit_is_idle_once_nobody_is_connected_and_nothing_moved_for_its_timeout() {
        let hour = Duration::from_secs(3600);
        assert!(circuit_is_idle(0, hour, hour));
        assert!(!circuit_is_idle(0, hour - Duration::from_secs(1), hour));
        assert!(
            !circuit_is_idle(1, 2 * hour, hour),
            "an open terminal with nothing typed is still in use"
        );
    }

    #[test]
    fn address_ranges_hold_their_clients() {
        let range = AddressRange::try_from("10.1.0.0/16".to_owned()).unwrap();
        assert!(range.contains("10.1.200.3".parse().unwrap()));
        assert!(!range.contains("10.2.0.1".parse().unwrap()));
        assert!(range.contains("::ffff:10.1.0.9".parse().unwrap()));
        let one = AddressRange::try_from("127.0.0.1".to_owned()).unwrap();
        assert_eq!(one.prefix, 32);
        assert!(AddressRange::try_from("10.0.0.0/33".to_owned()).is_err());
        assert!(AddressRange::try_from("nope".to_owned()).is_err());
        let all = AddressRange::try_from("0.0.0.0/0".to_owned()).unwrap();
        assert!(all.contains("192.168.1.1".parse().unwrap()));
        let admission = Admission {
            public: true,
            allowed: vec![range],
        };
        assert!(!admission.admits_address("127.0.0.1".parse().unwrap()));
    }
}
