//! Resumable uploads (the tus protocol's core and its creation step, which Backend.AI's client
//! speaks to its storage proxy): an upload is made for a path of a folder with its length, and
//! is then sent in any number of `PATCH`es, each from where the last stopped, across dropped
//! connections and restarts of the gateway. Its bytes gather on the folder's own volume
//! (`<volume>/uploads/<token>.part`, beside a record of where they go), so no gateway holds
//! them in memory and any gateway that mounts the volume can take the upload on; once whole
//! they are moved into the folder as [`crate::files::write`] moves a file. The token is the
//! upload's capability: unguessable, given to the caller who was allowed to write the folder,
//! and void after [`UPLOAD_LIFETIME`].

use std::collections::{BTreeMap, HashSet};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::{LazyLock, Mutex};

use chrono::{DateTime, Utc};
use domain::files::FolderPath;
use futures::{Stream, StreamExt};
use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;
use uuid::Uuid;

use crate::files::{self, FilesError};

/// How long an upload may take from its making to its last byte.
pub const UPLOAD_LIFETIME: chrono::Duration = chrono::Duration::hours(24);

/// Why an upload's step did not happen.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    #[error("no upload has this token, or it expired")]
    Unknown,
    #[error("the upload is at byte {at}, not at {asked}")]
    OffsetMismatch { at: u64, asked: u64 },
    #[error("the upload is {length} bytes long; this would take it past that")]
    TooLong { length: u64 },
    #[error("another request is sending this upload's bytes")]
    Busy,
    /// The request's body ended before its end (the client went away): what came is kept.
    #[error("the body was cut off at byte {at}: {reason}")]
    Cut { at: u64, reason: String },
    #[error(transparent)]
    Files(#[from] FilesError),
}

impl From<std::io::Error> for UploadError {
    fn from(e: std::io::Error) -> Self {
        UploadError::Files(FilesError::Io(e))
    }
}

/// Where an upload's bytes go, kept beside them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Upload {
    pub volume: String,
    /// The folder's owner and name.
    pub owner: Uuid,
    pub folder: String,
    /// The path inside the folder.
    pub path: String,
    pub length: u64,
    pub expires_at: DateTime<Utc>,
}

/// Whether `token` has the form of one [`create`] makes (32 lowercase hex digits), so that it
/// can name a file.
pub fn is_token(token: &str) -> bool {
    token.len() == 32
        && token
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn uploads_dir(root: &Path) -> PathBuf {
    root.join("uploads")
}

/// Makes an upload of `length` bytes to `path` of a folder on `volume`: answers its token.
pub async fn create(
    roots: &BTreeMap<String, PathBuf>,
    upload: Upload,
) -> Result<String, UploadError> {
    let root = roots
        .get(&upload.volume)
        .ok_or_else(|| FilesError::VolumeNotHere(upload.volume.clone()))?
        .clone();
    let token = Uuid::new_v4().simple().to_string();
    let record = serde_json::to_vec(&upload).map_err(std::io::Error::other)?;
    let name = token.clone();
    tokio::task::spawn_blocking(move || -> Result<(), UploadError> {
        let dir = uploads_dir(&root);
        std::fs::create_dir_all(&dir)?;
        forget_expired(&dir);
        std::fs::File::create(dir.join(format!("{name}.part")))?;
        std::fs::write(dir.join(format!("{name}.json")), record)?;
        Ok(())
    })
    .await
    .map_err(std::io::Error::other)??;
    Ok(token)
}

/// Removes the uploads in `dir` past their lifetime (best effort: one another gateway is
/// removing at the same time is simply gone).
fn forget_expired(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "json") {
            let expired = std::fs::read(&path)
                .ok()
                .and_then(|bytes| serde_json::from_slice::<Upload>(&bytes).ok())
                .is_none_or(|u| u.expires_at < Utc::now());
            if expired {
                let _ = std::fs::remove_file(path.with_extension("part"));
                let _ = std::fs::remove_file(&path);
            }
        }
    }
}

/// The upload `token` names on one of `roots`, with where its bytes gather.
async fn find(
    roots: &BTreeMap<String, PathBuf>,
    token: &str,
) -> Result<(Upload, PathBuf), UploadError> {
    if !is_token(token) {
        return Err(UploadError::Unknown);
    }
    for root in roots.values() {
        let dir = uploads_dir(root);
        let bytes = match tokio::fs::read(dir.join(format!("{token}.json"))).await {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == ErrorKind::NotFound => continue,
            Err(e) => return Err(e.into()),
        };
        let upload: Upload = serde_json::from_slice(&bytes).map_err(std::io::Error::other)?;
        if upload.expires_at < Utc::now() {
            return Err(UploadError::Unknown);
        }
        return Ok((upload, dir.join(format!("{token}.part"))));
    }
    Err(UploadError::Unknown)
}

/// How far upload `token` has come, and its length.
pub async fn offset(
    roots: &BTreeMap<String, PathBuf>,
    token: &str,
) -> Result<(u64, u64), UploadError> {
    let (upload, part) = find(roots, token).await?;
    let at = tokio::fs::metadata(&part)
        .await
        .map_err(|_| UploadError::Unknown)?
        .len();
    Ok((at, upload.length))
}

/// The uploads some request of this gateway is sending bytes of: one at a time each.
static SENDING: LazyLock<Mutex<HashSet<String>>> = LazyLock::new(Default::default);

/// Holds an upload's place in [`SENDING`] while its bytes are written.
struct Sending(String);

impl Sending {
    fn take(token: &str) -> Result<Sending, UploadError> {
        let mut sending = SENDING.lock().unwrap_or_else(|e| e.into_inner());
        if sending.insert(token.to_owned()) {
            Ok(Sending(token.to_owned()))
        } else {
            Err(UploadError::Busy)
        }
    }
}

impl Drop for Sending {
    fn drop(&mut self) {
        SENDING
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.0);
    }
}

/// Appends `body` to upload `token`, which must be at byte `from`: answers where it is now.
/// What arrived before a dropped connection is kept, so the next request goes on from there.
/// The last byte moves the whole file into its folder (`Some(path)` then), the directories
/// above it made, a file there replaced.
pub async fn append<S, E>(
    roots: &BTreeMap<String, PathBuf>,
    token: &str,
    from: u64,
    mut body: S,
) -> Result<(u64, Option<String>), UploadError>
where
    S: Stream<Item = Result<bytes::Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    let _sending = Sending::take(token)?;
    let (upload, part) = find(roots, token).await?;
    let mut file = tokio::fs::OpenOptions::new()
        .append(true)
        .open(&part)
        .await
        .map_err(|_| UploadError::Unknown)?;
    let at = file.metadata().await?.len();
    if at != from {
        return Err(UploadError::OffsetMismatch { at, asked: from });
    }
    let mut writer = tokio::io::BufWriter::with_capacity(1 << 20, &mut file);
    let mut now = at;
    let mut stopped = None;
    while let Some(chunk) = body.next().await {
        let chunk = match chunk {
            Ok(chunk) => chunk,
            // The client went away: what came is kept.
            Err(e) => {
                stopped = Some(UploadError::Cut {
                    at: now,
                    reason: e.to_string(),
                });
                break;
            }
        };
        if now + chunk.len() as u64 > upload.length {
            // Nothing past the length is kept.
            stopped = Some(UploadError::TooLong {
                length: upload.length,
            });
            break;
        }
        writer.write_all(&chunk).await?;
        now += chunk.len() as u64;
    }
    writer.flush().await?;
    drop(writer);
    if let Some(stopped) = stopped {
        return Err(stopped);
    }
    if now < upload.length {
        return Ok((now, None));
    }
    file.sync_all().await?;
    let path = FolderPath::parse(&upload.path).map_err(|e| std::io::Error::other(e.to_string()))?;
    let dir = files::folder_dir(roots, &upload.volume, upload.owner, &upload.folder)?;
    files::place(dir, path.clone(), part.clone()).await?;
    let _ = tokio::fs::remove_file(part.with_extension("json")).await;
    Ok((now, Some(path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunks(parts: &[&'static [u8]]) -> impl Stream<Item = Result<bytes::Bytes, String>> + Unpin {
        futures::stream::iter(
            parts
                .iter()
                .map(|p| Ok(bytes::Bytes::from_static(p)))
                .collect::<Vec<_>>(),
        )
    }

    fn setup() -> (PathBuf, BTreeMap<String, PathBuf>, Upload) {
        let root = std::env::temp_dir().join(format!("berth-uploads-{}", Uuid::new_v4().simple()));
        std::fs::create_dir_all(&root).unwrap();
        let roots = BTreeMap::from([("shared".to_string(), root.clone())]);
        let upload = Upload {
            volume: "shared".into(),
            owner: Uuid::now_v7(),
            folder: "data".into(),
            path: "in/file.bin".into(),
            length: 10,
            expires_at: Utc::now() + UPLOAD_LIFETIME,
        };
        (root, roots, upload)
    }

    #[tokio::test]
    async fn an_upload_goes_on_from_where_it_stopped_and_lands_whole_in_its_folder() {
        let (root, roots, upload) = setup();
        let owner = upload.owner;
        let token = create(&roots, upload).await.unwrap();
        assert!(is_token(&token));
        assert_eq!(offset(&roots, &token).await.unwrap(), (0, 10));
        // A connection that dropped after four bytes keeps them.
        let dropped = futures::stream::iter(vec![
            Ok(bytes::Bytes::from_static(b"0123")),
            Err("connection reset".to_string()),
        ]);
        assert!(matches!(
            append(&roots, &token, 0, dropped).await,
            Err(UploadError::Cut { at: 4, .. })
        ));
        assert_eq!(offset(&roots, &token).await.unwrap(), (4, 10));
        // From the wrong place: refused, nothing written.
        assert!(matches!(
            append(&roots, &token, 0, chunks(&[b"xx"])).await,
            Err(UploadError::OffsetMismatch { at: 4, asked: 0 })
        ));
        assert_eq!(
            append(&roots, &token, 4, chunks(&[b"45", b"67"]))
                .await
                .unwrap(),
            (8, None)
        );
        assert_eq!(
            append(&roots, &token, 8, chunks(&[b"89"])).await.unwrap(),
            (10, Some("in/file.bin".into()))
        );
        let placed = root
            .join("folders")
            .join(owner.simple().to_string())
            .join("data/in/file.bin");
        assert_eq!(std::fs::read(placed).unwrap(), b"0123456789");
        // Done: the token names nothing any more.
        assert!(matches!(
            offset(&roots, &token).await,
            Err(UploadError::Unknown)
        ));
        let _ = std::fs::remove_dir_all(root);
    }

    #[tokio::test]
    async fn bytes_past_the_length_are_refused_and_strange_or_expired_tokens_name_nothing() {
        let (root, roots, mut upload) = setup();
        let token = create(&roots, upload.clone()).await.unwrap();
        assert!(matches!(
            append(&roots, &token, 0, chunks(&[b"0123456789", b"x"])).await,
            Err(UploadError::TooLong { length: 10 })
        ));
        for strange in ["../../etc/passwd", "ABCDEF", ""] {
            assert!(matches!(
                offset(&roots, strange).await,
                Err(UploadError::Unknown)
            ));
        }
        upload.expires_at = Utc::now() - chrono::Duration::seconds(1);
        let expired = create(&roots, upload).await.unwrap();
        assert!(matches!(
            offset(&roots, &expired).await,
            Err(UploadError::Unknown)
        ));
        let _ = std::fs::remove_dir_all(root);
    }
}
