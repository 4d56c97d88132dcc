//! The Backend.AI master key: the secret that Backend.AI keypairs' secret keys are derived
//! with. It is given as a setting or kept in a file that the first start makes (mode 0600);
//! it is never in the database or the log.

use std::path::PathBuf;

/// Where the gateway finds the master key that Backend.AI keypairs' secret keys are derived
/// with (it is never in the database or the log).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MasterKey {
    /// Given as a setting (`BERTH_BACKENDAI_MASTER_KEY`).
    Given(Vec<u8>),
    /// Kept in a file, made (mode 0600, 32 random bytes as hex) when missing.
    File(PathBuf),
}

/// Where the master key is kept when no setting names it.
pub const DEFAULT_MASTER_KEY_FILE: &str = ".berth/backendai-master.key";

/// Fewest characters a master key has.
pub const MIN_MASTER_KEY_BYTES: usize = 32;

impl MasterKey {
    /// The key: given, or read from its file, which is made when missing.
    pub fn load(&self) -> anyhow::Result<Vec<u8>> {
        use anyhow::Context;
        let path = match self {
            MasterKey::Given(key) => return Ok(key.clone()),
            MasterKey::File(path) => path,
        };
        match std::fs::read_to_string(path) {
            Ok(text) => {
                let key = text.trim().as_bytes().to_vec();
                anyhow::ensure!(
                    key.len() >= MIN_MASTER_KEY_BYTES,
                    "{}: a master key has at least {MIN_MASTER_KEY_BYTES} characters",
                    path.display()
                );
                Ok(key)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                use std::io::Write;
                use std::os::unix::fs::OpenOptionsExt;
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    std::fs::create_dir_all(dir)
                        .with_context(|| format!("create {}", dir.display()))?;
                }
                let bytes: [u8; 32] = rand::random();
                let key = hex::encode(bytes);
                std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(path)
                    .and_then(|mut f| f.write_all(key.as_bytes()))
                    .with_context(|| {
                        format!("write the Backend.AI master key to {}", path.display())
                    })?;
                tracing::info!(path = %path.display(), "made a Backend.AI master key");
                Ok(key.into_bytes())
            }
            Err(e) => Err(e).with_context(|| format!("read {}", path.display())),
        }
    }
}

/// A master key given as a setting: long enough (clap's value parser).
pub(super) fn parse_master_key(text: &str) -> Result<String, String> {
    if text.len() >= MIN_MASTER_KEY_BYTES {
        Ok(text.to_owned())
    } else {
        Err(format!(
            "a master key has at least {MIN_MASTER_KEY_BYTES} characters (e.g. `$(openssl rand -hex 32)`)"
        ))
    }
}
