//! What every room reads of the terminals the agent serves (`terminal` serves them): the key
//! their tokens are made with, kept on the host so that a token outlives a restart of the
//! agent, and which sessions' terminals are served now.
//!
//! A session's terminal token is an HMAC-SHA256 of its id under the key: the agent hands it to
//! the control plane when the terminal is started, berth's proxy hands it back on every
//! request (`Authorization: token ...`), and the terminal's port alone lets nobody in. The key
//! is made once per agent, at `<data>/terminal-keys/<agent id>` (0600).

use std::collections::HashSet;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use hmac::{Hmac, Mac};
use rand::Rng;
use sha2::Sha256;
use uuid::Uuid;

type HmacSha256 = Hmac<Sha256>;

/// What the message of a token starts with, so the key signs nothing else by accident.
const CONTEXT: &[u8] = b"berth terminal\0";

/// The agent's terminals: their key, and the sessions whose terminal is served now.
#[derive(Clone)]
pub(super) struct Terminals {
    key: Arc<[u8; 32]>,
    served: Arc<Mutex<HashSet<Uuid>>>,
}

impl Terminals {
    /// With the key kept for `agent_id` under `data_dir`, made now if there is none.
    pub(super) fn open(data_dir: &Path, agent_id: &str) -> io::Result<Terminals> {
        Ok(Terminals::with_key(key_in(data_dir, agent_id)?))
    }

    fn with_key(key: [u8; 32]) -> Terminals {
        Terminals {
            key: Arc::new(key),
            served: Arc::default(),
        }
    }

    /// The token that opens `session_id`'s terminal.
    pub(super) fn token(&self, session_id: Uuid) -> String {
        hex::encode(self.mac(session_id).finalize().into_bytes())
    }

    /// Whether an `Authorization` header's value carries `session_id`'s token (compared in
    /// constant time).
    pub(super) fn admits(&self, session_id: Uuid, authorization: Option<&str>) -> bool {
        let given = authorization
            .and_then(|v| v.strip_prefix("token "))
            .and_then(|t| hex::decode(t.trim()).ok());
        given.is_some_and(|tag| self.mac(session_id).verify_slice(&tag).is_ok())
    }

    fn mac(&self, session_id: Uuid) -> HmacSha256 {
        let mut mac = HmacSha256::new_from_slice(self.key.as_slice()).expect("HMAC takes any key");
        mac.update(CONTEXT);
        mac.update(session_id.as_bytes());
        mac
    }

    /// Whether the agent serves `session_id`'s terminal now.
    pub(super) fn serves(&self, session_id: Uuid) -> bool {
        self.lock().contains(&session_id)
    }

    pub(super) fn set_served(&self, session_id: Uuid, served: bool) {
        if served {
            self.lock().insert(session_id);
        } else {
            self.lock().remove(&session_id);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<Uuid>> {
        self.served.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Where `agent_id`'s terminal key is kept.
fn key_path(data_dir: &Path, agent_id: &str) -> PathBuf {
    data_dir.join("terminal-keys").join(agent_id)
}

/// Reads the key kept for `agent_id`, or makes one: written whole to a file of its own, then
/// renamed into place, so a crash never leaves half a key.
fn key_in(data_dir: &Path, agent_id: &str) -> io::Result<[u8; 32]> {
    let path = key_path(data_dir, agent_id);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let key = hex::decode(text.trim())
                .ok()
                .and_then(|k| <[u8; 32]>::try_from(k).ok());
            return key.ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "{} is not a terminal key (64 hex digits); remove it for a new one",
                        path.display()
                    ),
                )
            });
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let dir = path.parent().expect("the key has a folder");
    std::fs::create_dir_all(dir)?;
    let key: [u8; 32] = rand::rng().random();
    let fresh = dir.join(format!(".{agent_id}.{}", Uuid::new_v4().simple()));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&fresh)?;
    file.write_all(hex::encode(key).as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&fresh, &path)?;
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_opens_its_sessions_terminal_alone() {
        let terminals = Terminals::with_key([7; 32]);
        let (mine, other) = (Uuid::now_v7(), Uuid::now_v7());
        let token = terminals.token(mine);
        assert_eq!(token.len(), 64);
        assert_eq!(token, terminals.token(mine), "the same every time");
        assert!(terminals.admits(mine, Some(&format!("token {token}"))));
        assert!(!terminals.admits(other, Some(&format!("token {token}"))));
        assert!(!terminals.admits(mine, Some(&format!("Bearer {token}"))));
        assert!(!terminals.admits(mine, Some("token ")));
        assert!(!terminals.admits(mine, Some("token zz")));
        assert!(!terminals.admits(mine, None));
        let another_host = Terminals::with_key([8; 32]);
        assert!(!another_host.admits(mine, Some(&format!("token {token}"))));
    }

    #[test]
    fn the_key_is_made_once_and_read_again() {
        let dir = std::env::temp_dir().join(format!("berth-tty-{}", Uuid::new_v4().simple()));
        let first = key_in(&dir, "a1").unwrap();
        assert_eq!(key_in(&dir, "a1").unwrap(), first, "kept across starts");
        assert_ne!(key_in(&dir, "a2").unwrap(), first, "one per agent");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(key_path(&dir, "a1"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        std::fs::write(key_path(&dir, "a1"), "not a key").unwrap();
        let refused = key_in(&dir, "a1").unwrap_err();
        assert!(
            refused.to_string().contains("not a terminal key"),
            "{refused}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
