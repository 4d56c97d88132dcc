//! The fence around each session's network: every session (a single kernel too) gets a
//! bridge of its own, named `berth<10 hex>` so one firewall rule matches them all, on a
//! subnet of the agent's pool; and the host's firewall (iptables, as Docker's own rules) keeps
//! sessions from the host itself (its private services: PostgreSQL, NATS, the engine) and
//! from the link-local cloud metadata address, unless the operator allows an address.
//!
//! Docker already keeps one bridge's containers from another's (its isolation chains), and a
//! single kernel's bridge has inter-container traffic off. What Docker does not stop is a
//! container reaching the host's own ports through its bridge's gateway (that traffic is the
//! host's INPUT, not FORWARD) and any address outside (metadata included): two chains of
//! berth's own do, reached from INPUT and DOCKER-USER for the `berth+` interfaces and a
//! swarm's `docker_gwbridge` (a cluster's kernels on an overlay go out through it) alone.
//!
//! The rules match interface names, never one session: nothing is added or removed per
//! session, so a session that ends (or an agent that dies) leaves no rule behind. The chains
//! are written whole, atomically (`iptables-restore --noflush`), at every agent start, so a
//! changed allow list replaces the old one; the jumps are added once.

use std::net::Ipv4Addr;
use std::process::Stdio;

pub use ipnet::Ipv4Net;
use tokio::io::AsyncWriteExt;
use uuid::Uuid;

/// The prefix of every session bridge's interface name (`iptables -i berth+`).
pub const BRIDGE_PREFIX: &str = "berth";
/// berth's chain for sessions' traffic to the host itself.
pub const CHAIN_IN: &str = "BERTH-SESSIONS-IN";
/// berth's chain for sessions' traffic through the host (to the metadata address).
pub const CHAIN_FORWARD: &str = "BERTH-SESSIONS-FWD";
/// The link-local range the cloud's instance metadata lives in (169.254.169.254).
pub const LINK_LOCAL: &str = "169.254.0.0/16";

/// How sessions' networks are fenced on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkFence {
    /// Where each session's subnet is carved from (a /27 each, or larger for big clusters).
    pub subnets: Ipv4Net,
    /// Addresses sessions may reach although they are the host's or link-local (an
    /// operator's choice, e.g. a package mirror on the host).
    pub allow: Vec<Ipv4Net>,
    /// Whether the agent installs the host firewall rules (off where the agent is not root,
    /// or the operator keeps the host's firewall; sessions then still get their own bridges).
    pub firewall: bool,
    /// How many bridges for single kernels the agent keeps made ahead ([`super::spares`]).
    pub spares: usize,
}

impl Default for NetworkFence {
    fn default() -> Self {
        NetworkFence {
            subnets: "10.213.0.0/16".parse().expect("a network"),
            allow: Vec::new(),
            firewall: true,
            spares: 2,
        }
    }
}

/// The interface name of session `id`'s bridge: `berth` and the last 10 hex digits of its id
/// (its random part; the first digits of a v7 id are its time), 15 characters, Linux's most.
pub fn bridge_name(id: Uuid) -> String {
    let hex = id.simple().to_string();
    format!("{BRIDGE_PREFIX}{}", &hex[hex.len() - 10..])
}

/// The subnet session `id` tries at `attempt` (0, 1, ...) for `hosts` containers: a block of
/// the pool picked from its id, the next one at each later attempt (another agent on the
/// engine, or another session, may hold one). Pure.
pub fn subnet(pool: Ipv4Net, id: Uuid, hosts: u32, attempt: u32) -> Ipv4Net {
    // Room for the hosts, the gateway, the network and broadcast addresses, at least a /28.
    let needed = (hosts + 3).next_power_of_two().max(16);
    let prefix = (32 - needed.trailing_zeros() as u8).max(pool.prefix_len());
    let blocks = 1u64 << (prefix - pool.prefix_len());
    let seed = (id.as_u128() as u64).wrapping_add(attempt as u64);
    let index = seed % blocks;
    let base = u32::from(pool.network()) + (index as u32) * (1u32 << (32 - prefix));
    Ipv4Net::new(Ipv4Addr::from(base), prefix).expect("a prefix within 0..=32")
}

/// The rules of berth's two chains, for `iptables-restore --noflush` (declaring a chain
/// empties it first, so the text replaces what an earlier start wrote). Pure.
pub fn chains(allow: &[Ipv4Net]) -> String {
    let mut text = String::from("*filter\n");
    for chain in [CHAIN_IN, CHAIN_FORWARD] {
        text.push_str(&format!(":{chain} - [0:0]\n"));
    }
    for chain in [CHAIN_IN, CHAIN_FORWARD] {
        // Answers to what the host (berth's proxy, the agent's terminal) opened.
        text.push_str(&format!(
            "-A {chain} -m conntrack --ctstate ESTABLISHED,RELATED -j RETURN\n"
        ));
        for net in allow {
            text.push_str(&format!("-A {chain} -d {net} -j RETURN\n"));
        }
    }
    // Nothing of the host's own: refused at once (a reset), so a client fails fast.
    text.push_str(&format!(
        "-A {CHAIN_IN} -p tcp -j REJECT --reject-with tcp-reset\n\
         -A {CHAIN_IN} -j REJECT --reject-with icmp-port-unreachable\n"
    ));
    text.push_str(&format!(
        "-A {CHAIN_FORWARD} -d {LINK_LOCAL} -p tcp -j REJECT --reject-with tcp-reset\n\
         -A {CHAIN_FORWARD} -d {LINK_LOCAL} -j REJECT --reject-with icmp-port-unreachable\n"
    ));
    text.push_str("COMMIT\n");
    text
}

/// The interface of the bridge an engine of a swarm gives containers on an overlay network
/// for their traffic out of it (a cluster across hosts): fenced as session bridges are.
pub const SWARM_BRIDGE: &str = "docker_gwbridge";

/// The jumps into berth's chains, as `iptables` arguments after `-C`/`-I`: from INPUT and
/// DOCKER-USER (the chain Docker leaves to the host's own rules), for session bridges and
/// the swarm's bridge only (a rule naming an interface the host lacks matches nothing).
pub fn jumps() -> Vec<[String; 5]> {
    let sessions = format!("{BRIDGE_PREFIX}+");
    let mut jumps = Vec::new();
    for iface in [sessions.as_str(), SWARM_BRIDGE] {
        for (from, to) in [("INPUT", CHAIN_IN), ("DOCKER-USER", CHAIN_FORWARD)] {
            jumps.push([
                from.into(),
                "-i".into(),
                iface.into(),
                "-j".into(),
                to.into(),
            ]);
        }
    }
    jumps
}

/// Why the fence could not be put up.
#[derive(Debug, thiserror::Error)]
pub enum FenceError {
    #[error("running `{command}` failed: {source}")]
    Spawn {
        command: String,
        source: std::io::Error,
    },
    #[error("`{command}` failed: {stderr}")]
    Refused { command: String, stderr: String },
}

/// Puts up (or renews) the host's rules for `fence`: the chains written whole, the jumps
/// added where missing. Idempotent, and safe while other agents on the host do the same.
pub async fn install(fence: &NetworkFence) -> Result<(), FenceError> {
    restore(&chains(&fence.allow)).await?;
    for jump in jumps() {
        let present = iptables("-C", &jump).await.is_ok();
        if !present {
            iptables("-I", &jump).await?;
        }
    }
    Ok(())
}

async fn restore(text: &str) -> Result<(), FenceError> {
    let command = "iptables-restore --noflush".to_string();
    let mut child = tokio::process::Command::new("iptables-restore")
        .arg("--noflush")
        .arg("--wait")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| FenceError::Spawn {
            command: command.clone(),
            source,
        })?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(text.as_bytes())
            .await
            .map_err(|source| FenceError::Spawn {
                command: command.clone(),
                source,
            })?;
    }
    let out = child
        .wait_with_output()
        .await
        .map_err(|source| FenceError::Spawn {
            command: command.clone(),
            source,
        })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(FenceError::Refused {
            command,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        })
    }
}

async fn iptables(op: &str, rule: &[String]) -> Result<(), FenceError> {
    let command = format!("iptables {op} {}", rule.join(" "));
    let out = tokio::process::Command::new("iptables")
        .arg("--wait")
        .arg(op)
        .args(rule)
        .output()
        .await
        .map_err(|source| FenceError::Spawn {
            command: command.clone(),
            source,
        })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(FenceError::Refused {
            command,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bridge_is_named_from_the_random_end_of_the_session_id_within_15_characters() {
        let id = Uuid::parse_str("0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b").unwrap();
        let name = bridge_name(id);
        assert_eq!(name, "berth1d2e3f4a5b");
        assert!(name.len() <= 15);
    }

    #[test]
    fn subnets_are_blocks_of_the_pool_sized_for_the_cluster_and_move_on_each_attempt() {
        let pool: Ipv4Net = "10.213.0.0/16".parse().unwrap();
        let id = Uuid::now_v7();
        let one = subnet(pool, id, 1, 0);
        assert_eq!(one.prefix_len(), 28);
        assert!(pool.contains(&one));
        assert_ne!(subnet(pool, id, 1, 1), one, "the next try is another block");
        let big = subnet(pool, id, 40, 0);
        assert_eq!(big.prefix_len(), 26, "64 addresses for 40 kernels");
        assert_eq!(big.network(), big.addr(), "aligned on its size");
        let tiny: Ipv4Net = "192.168.7.0/28".parse().unwrap();
        assert_eq!(subnet(tiny, id, 1, 3), tiny, "never larger than the pool");
    }

    #[test]
    fn the_chains_answer_what_the_host_opened_then_refuse_the_host_and_the_metadata_address() {
        let text = chains(&["192.0.2.10/32".parse().unwrap()]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "*filter");
        assert_eq!(*lines.last().unwrap(), "COMMIT");
        let at = |rule: &str| lines.iter().position(|l| *l == rule).expect(rule);
        let established =
            at("-A BERTH-SESSIONS-IN -m conntrack --ctstate ESTABLISHED,RELATED -j RETURN");
        let allowed = at("-A BERTH-SESSIONS-IN -d 192.0.2.10/32 -j RETURN");
        let refused = at("-A BERTH-SESSIONS-IN -p tcp -j REJECT --reject-with tcp-reset");
        assert!(established < allowed && allowed < refused);
        at("-A BERTH-SESSIONS-FWD -d 192.0.2.10/32 -j RETURN");
        at("-A BERTH-SESSIONS-FWD -d 169.254.0.0/16 -p tcp -j REJECT --reject-with tcp-reset");
        let jumps: Vec<String> = jumps().iter().map(|j| j.join(" ")).collect();
        assert_eq!(
            jumps,
            [
                "INPUT -i berth+ -j BERTH-SESSIONS-IN",
                "DOCKER-USER -i berth+ -j BERTH-SESSIONS-FWD",
                "INPUT -i docker_gwbridge -j BERTH-SESSIONS-IN",
                "DOCKER-USER -i docker_gwbridge -j BERTH-SESSIONS-FWD",
            ]
        );
    }
}
