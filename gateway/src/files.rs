//! A folder's files, served by the gateway from the volumes its host mounts (as Backend.AI's
//! storage proxy serves its volumes): listed, read, written, made and removed where they live,
//! `<volume>/folders/<owner>/<folder>`. Which paths may be asked for is `domain::files`' rule;
//! here no link on disk is followed, so nothing outside the folder is reached through one.
//! Bodies are streamed both ways: a file never sits in memory whole.

use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use bus::protocol::Measured;
use domain::files::FolderPath;
use domain::folders::{Quota, QuotaExceeded};
use futures::{Stream, StreamExt};
use tokio::io::AsyncWriteExt;
use uuid::Uuid;

pub use crate::model::EntryKind;

/// Why a file operation did not happen.
#[derive(Debug, thiserror::Error)]
pub enum FilesError {
    /// The folder's volume is not mounted on this gateway's host.
    #[error("volume `{0}` is not mounted where this gateway runs (BERTH_VOLUMES)")]
    VolumeNotHere(String),
    #[error("`{0}` does not exist in the folder")]
    Missing(String),
    /// A link on the way: links are never followed, in or out of the folder.
    #[error("`{0}` is a link, which is not followed")]
    Link(String),
    #[error("`{0}` is a directory")]
    IsDirectory(String),
    #[error("`{0}` is not a directory")]
    NotDirectory(String),
    #[error("`{0}` exists")]
    Exists(String),
    #[error("the folder itself cannot be {0}")]
    Root(&'static str),
    #[error(transparent)]
    Quota(#[from] QuotaExceeded),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// One entry of a directory: its name, kind, size (a file's bytes) and when it last changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub kind: EntryKind,
    pub size: u64,
    pub modified: Option<chrono::DateTime<chrono::Utc>>,
    /// Its permission bits (`rwx` for its owner, group and others).
    pub mode: u32,
}

/// Where folder `name` of `owner` lives on this host, when its volume is mounted here
/// (`roots`: volume → mount).
pub fn folder_dir(
    roots: &BTreeMap<String, PathBuf>,
    volume: &str,
    owner: Uuid,
    name: &str,
) -> Result<PathBuf, FilesError> {
    let root = roots
        .get(volume)
        .ok_or_else(|| FilesError::VolumeNotHere(volume.to_owned()))?;
    Ok(root
        .join("folders")
        .join(owner.simple().to_string())
        .join(name))
}

/// `path` inside `dir`, every component of it that exists checked to be no link (the last
/// one too, unless `last_may_be_link`); what does not exist yet is fine.
fn resolve(dir: &Path, path: &FolderPath, last_may_be_link: bool) -> Result<PathBuf, FilesError> {
    let mut at = dir.to_path_buf();
    let count = path.components().len();
    for (i, component) in path.components().iter().enumerate() {
        at.push(component);
        match std::fs::symlink_metadata(&at) {
            Ok(meta) if meta.file_type().is_symlink() => {
                if !(last_may_be_link && i + 1 == count) {
                    return Err(FilesError::Link(shown(path, i)));
                }
            }
            Ok(meta) if i + 1 < count && !meta.is_dir() => {
                return Err(FilesError::NotDirectory(shown(path, i)));
            }
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(at)
}

/// The first `i + 1` components of `path`, as the API shows them.
fn shown(path: &FolderPath, i: usize) -> String {
    path.components()[..=i].join("/")
}

/// Makes `path`'s directories inside `dir` (the folder's own too), none of them a link.
fn make_dirs(dir: &Path, path: &FolderPath) -> Result<PathBuf, FilesError> {
    std::fs::create_dir_all(dir)?;
    let mut at = dir.to_path_buf();
    for (i, component) in path.components().iter().enumerate() {
        at.push(component);
        match std::fs::symlink_metadata(&at) {
            Ok(meta) if meta.file_type().is_symlink() => {
                return Err(FilesError::Link(shown(path, i)))
            }
            Ok(meta) if !meta.is_dir() => return Err(FilesError::NotDirectory(shown(path, i))),
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => match std::fs::create_dir(&at) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e.into()),
            },
            Err(e) => return Err(e.into()),
        }
    }
    Ok(at)
}

/// Runs `work` on a blocking thread: the file system's calls block.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, FilesError> + Send + 'static,
) -> Result<T, FilesError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| FilesError::Io(std::io::Error::other(e)))?
}

/// The entries of directory `path`, by name (a folder no session has used yet is empty).
pub async fn list(dir: PathBuf, path: FolderPath) -> Result<Vec<Entry>, FilesError> {
    blocking(move || {
        let at = resolve(&dir, &path, false)?;
        let read = match std::fs::read_dir(&at) {
            Ok(read) => read,
            Err(e) if e.kind() == ErrorKind::NotFound && path.is_root() => return Ok(Vec::new()),
            Err(e) if e.kind() == ErrorKind::NotFound => {
                return Err(FilesError::Missing(path.display()))
            }
            Err(e) if e.raw_os_error() == Some(20) => {
                return Err(FilesError::NotDirectory(path.display()))
            }
            Err(e) => return Err(e.into()),
        };
        let mut entries = Vec::new();
        for entry in read {
            let entry = entry?;
            let Ok(meta) = entry.path().symlink_metadata() else {
                continue;
            };
            let kind = if meta.file_type().is_symlink() {
                EntryKind::Link
            } else if meta.is_dir() {
                EntryKind::Directory
            } else if meta.is_file() {
                EntryKind::File
            } else {
                EntryKind::Other
            };
            entries.push(Entry {
                name: entry.file_name().to_string_lossy().into_owned(),
                kind,
                size: if kind == EntryKind::File {
                    meta.len()
                } else {
                    0
                },
                modified: meta.modified().ok().map(chrono::DateTime::from),
                mode: std::os::unix::fs::MetadataExt::mode(&meta) & 0o777,
            });
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(entries)
    })
    .await
}

/// The file at `path`, to be read: a regular file reached through no link.
pub async fn readable(dir: PathBuf, path: FolderPath) -> Result<PathBuf, FilesError> {
    blocking(move || {
        if path.is_root() {
            return Err(FilesError::Root("downloaded"));
        }
        let at = resolve(&dir, &path, false)?;
        match std::fs::symlink_metadata(&at) {
            Ok(meta) if meta.is_dir() => Err(FilesError::IsDirectory(path.display())),
            Ok(_) => Ok(at),
            Err(e) if e.kind() == ErrorKind::NotFound => Err(FilesError::Missing(path.display())),
            Err(e) => Err(e.into()),
        }
    })
    .await
}

/// What a download names: a file, or a directory (sent as an archive).
pub enum Download {
    File(PathBuf),
    Directory(PathBuf),
}

/// The file or directory at `path` for a download; no link is followed on the way or at it.
pub async fn downloadable(dir: PathBuf, path: FolderPath) -> Result<Download, FilesError> {
    blocking(move || {
        let at = resolve(&dir, &path, false)?;
        match std::fs::symlink_metadata(&at) {
            Ok(meta) if meta.is_dir() => Ok(Download::Directory(at)),
            Ok(_) => Ok(Download::File(at)),
            Err(e) if e.kind() == ErrorKind::NotFound => Err(FilesError::Missing(path.display())),
            Err(e) => Err(e.into()),
        }
    })
    .await
}

/// A tar archive of directory `at` under the name `name`, made as it is read (a blocking
/// thread writes it into a small pipe): its links archived as links, never followed, so
/// nothing outside the folder goes into it, and memory holds a pipe's worth at a time.
pub fn archive(at: PathBuf, name: String) -> impl Stream<Item = std::io::Result<bytes::Bytes>> {
    let (reader, writer) = tokio::io::duplex(256 << 10);
    let writer = tokio_util::io::SyncIoBridge::new(writer);
    tokio::task::spawn_blocking(move || {
        let mut builder = tar::Builder::new(writer);
        builder.follow_symlinks(false);
        // A reader that goes away ends the writing with a broken pipe: nothing to report.
        let _ = builder
            .append_dir_all(&name, &at)
            .and_then(|()| builder.finish());
    });
    tokio_util::io::ReaderStream::new(reader)
}

/// What the folder in `dir` holds now, every entry counted as its usage is.
pub async fn usage(dir: PathBuf) -> Result<u64, FilesError> {
    blocking(move || Ok(Measured::walk(&dir, u64::MAX).bytes)).await
}

/// What the folder in `dir` holds now, when it is there (a `host-local` folder lives on the
/// disk of the agent that ran its sessions, which may be another host) and a walk of at most
/// `most_entries` counts it all.
pub async fn measure_within(dir: PathBuf, most_entries: u64) -> Option<Measured> {
    tokio::task::spawn_blocking(move || {
        dir.is_dir()
            .then(|| Measured::walk(&dir, most_entries))
            .filter(|m| m.whole)
    })
    .await
    .ok()
    .flatten()
}

/// Where a folder stands against its quota before a write to one path: what it holds, as
/// measured now, and what the write would replace there.
#[derive(Debug, Clone, Copy)]
pub struct Room {
    quota: Quota,
    used: u64,
    replaced: u64,
}

impl Room {
    /// Measures the folder in `dir` (every entry, as its usage is counted) and the file at
    /// `path`, which a write there replaces; `None` when the folder has no quota.
    pub async fn measure(
        dir: PathBuf,
        path: FolderPath,
        quota: Option<Quota>,
    ) -> Result<Option<Room>, FilesError> {
        let Some(quota) = quota else {
            return Ok(None);
        };
        blocking(move || {
            let used = Measured::walk(&dir, u64::MAX).bytes;
            let replaced = match resolve(&dir, &path, true)?.symlink_metadata() {
                Ok(meta) if meta.is_file() => meta.len(),
                _ => 0,
            };
            Ok(Some(Room {
                quota,
                used,
                replaced,
            }))
        })
        .await
    }

    /// Whether `incoming` bytes fit.
    pub fn admits(&self, incoming: u64) -> Result<(), FilesError> {
        Ok(self.quota.admits(self.used, self.replaced, incoming)?)
    }

    /// Refuses a write of `length` bytes to `path` in the folder in `dir` when its `quota`
    /// has no room for them (a folder without a quota is not measured).
    pub async fn check(
        dir: PathBuf,
        path: FolderPath,
        quota: Option<Quota>,
        length: u64,
    ) -> Result<(), FilesError> {
        match Room::measure(dir, path, quota).await? {
            Some(room) => room.admits(length),
            None => Ok(()),
        }
    }
}

/// Writes `body` to `path` (its directories made as needed), replacing a file there: written
/// beside it under a name of its own and moved into place once whole, so a reader never sees
/// half a file and a failed upload leaves nothing. Cut short, and nothing kept, once it passes
/// the folder's `room`. The bytes written.
pub async fn write<S, E>(
    dir: PathBuf,
    path: FolderPath,
    mut body: S,
    room: Option<Room>,
) -> Result<u64, FilesError>
where
    S: Stream<Item = Result<bytes::Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    let (parent_dir, target) = blocking(move || target_of(&dir, &path)).await?;
    let name = target.file_name().unwrap_or_default().to_string_lossy();
    let partial = parent_dir.join(format!(".berth-upload-{}-{name}", Uuid::new_v4().simple()));
    let written = async {
        // The body comes in frames of a few KiB; each write to a file is a trip to a blocking
        // thread, so they are gathered a MiB at a time.
        let mut file =
            tokio::io::BufWriter::with_capacity(1 << 20, tokio::fs::File::create(&partial).await?);
        let mut bytes = 0u64;
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| std::io::Error::other(e.to_string()))?;
            bytes += chunk.len() as u64;
            if let Some(room) = &room {
                room.admits(bytes)?;
            }
            file.write_all(&chunk).await?;
        }
        file.flush().await?;
        file.get_ref().sync_all().await?;
        tokio::fs::rename(&partial, &target).await?;
        Ok::<u64, FilesError>(bytes)
    }
    .await;
    if written.is_err() {
        let _ = tokio::fs::remove_file(&partial).await;
    }
    written
}

/// Where a file written to `path` goes: its directory (made as needed, every directory above
/// it checked to be no link as it is made) and its own path there. The file's own name may be
/// a link, which a write replaces (the rename never follows it), but not a directory.
fn target_of(dir: &Path, path: &FolderPath) -> Result<(PathBuf, PathBuf), FilesError> {
    let Some(parent) = path.parent() else {
        return Err(FilesError::Root("written"));
    };
    let parent_dir = make_dirs(dir, &parent)?;
    let target = parent_dir.join(path.file_name().unwrap_or_default());
    if target.symlink_metadata().is_ok_and(|m| m.is_dir()) {
        return Err(FilesError::IsDirectory(path.display()));
    }
    Ok((parent_dir, target))
}

/// Moves `whole`, a file written elsewhere on the folder's volume (a finished resumable
/// upload), to `path`, as [`write`] places what it wrote.
pub async fn place(dir: PathBuf, path: FolderPath, whole: PathBuf) -> Result<(), FilesError> {
    blocking(move || {
        let (_, target) = target_of(&dir, &path)?;
        std::fs::rename(&whole, &target)?;
        Ok(())
    })
    .await
}

/// Makes directory `path` (and those above it); an existing directory is refused as existing.
pub async fn make_directory(dir: PathBuf, path: FolderPath) -> Result<(), FilesError> {
    blocking(move || {
        if path.is_root() {
            return Err(FilesError::Root("made"));
        }
        if resolve(&dir, &path, false)?.symlink_metadata().is_ok() {
            return Err(FilesError::Exists(path.display()));
        }
        make_dirs(&dir, &path).map(|_| ())
    })
    .await
}

/// Removes the file, link or directory (with all it holds) at `path`; a link is removed
/// itself, never what it points to.
pub async fn remove(dir: PathBuf, path: FolderPath) -> Result<(), FilesError> {
    blocking(move || {
        if path.is_root() {
            return Err(FilesError::Root("removed"));
        }
        let at = resolve(&dir, &path, true)?;
        match std::fs::symlink_metadata(&at) {
            Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(&at)?,
            Ok(_) => std::fs::remove_file(&at)?,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                return Err(FilesError::Missing(path.display()))
            }
            Err(e) => return Err(e.into()),
        }
        Ok(())
    })
    .await
}

/// Moves (or renames) what `from` names to `to`, inside the folder; the directories above
/// `to` are made. A link at `from` is moved itself; `to` must not exist, nor be inside `from`.
pub async fn move_entry(dir: PathBuf, from: FolderPath, to: FolderPath) -> Result<(), FilesError> {
    blocking(move || {
        if from.is_root() || to.is_root() {
            return Err(FilesError::Root("moved"));
        }
        let source = resolve(&dir, &from, true)?;
        if source.symlink_metadata().is_err() {
            return Err(FilesError::Missing(from.display()));
        }
        if to.components().starts_with(from.components()) {
            return Err(FilesError::Exists(to.display()));
        }
        let Some(parent) = to.parent() else {
            return Err(FilesError::Root("moved"));
        };
        let target = make_dirs(&dir, &parent)?.join(to.file_name().unwrap_or_default());
        if target.symlink_metadata().is_ok() {
            return Err(FilesError::Exists(to.display()));
        }
        std::fs::rename(&source, &target)?;
        Ok(())
    })
    .await
}

/// Moves a folder's directory to its new name `to` (beside it, on the same volume). A folder
/// no session or upload has used yet has none: nothing moves.
pub async fn rename_folder_dir(from: PathBuf, to: PathBuf) -> Result<(), FilesError> {
    blocking(move || {
        if to.symlink_metadata().is_ok() {
            return Err(FilesError::Exists(to.display().to_string()));
        }
        match std::fs::rename(&from, &to) {
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
            other => Ok(other?),
        }
    })
    .await
}

/// Copies folder directory `from` whole to `to` (which must not exist yet): directories and
/// files copied, links copied as links (never followed, so nothing outside the folder is
/// read). A folder with no directory yet copies to an empty one. On a failure what was copied
/// is removed.
pub async fn copy_folder_dir(from: PathBuf, to: PathBuf) -> Result<u64, FilesError> {
    blocking(move || {
        if to.symlink_metadata().is_ok() {
            return Err(FilesError::Exists(to.display().to_string()));
        }
        let copied = copy_tree(&from, &to);
        if copied.is_err() {
            let _ = std::fs::remove_dir_all(&to);
        }
        copied
    })
    .await
}

/// The bytes of files copied from `from` to `to`, walking without following a link.
fn copy_tree(from: &Path, to: &Path) -> Result<u64, FilesError> {
    std::fs::create_dir_all(to)?;
    let entries = match std::fs::read_dir(from) {
        Ok(entries) => entries,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e.into()),
    };
    let mut bytes = 0;
    for entry in entries {
        let entry = entry?;
        let (source, target) = (entry.path(), to.join(entry.file_name()));
        let kind = entry.file_type()?;
        if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&source)?, &target)?;
        } else if kind.is_dir() {
            bytes += copy_tree(&source, &target)?;
        } else if kind.is_file() {
            bytes += std::fs::copy(&source, &target)?;
        }
    }
    Ok(bytes)
}

/// Removes a folder's directory with all it holds (links inside removed, never followed).
pub async fn remove_folder_dir(dir: PathBuf) -> Result<(), FilesError> {
    blocking(move || match std::fs::remove_dir_all(&dir) {
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        other => Ok(other?),
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp() -> PathBuf {
        let dir = std::env::temp_dir().join(format!("berth-files-{}", Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn p(path: &str) -> FolderPath {
        FolderPath::parse(path).unwrap()
    }

    #[tokio::test]
    async fn files_are_written_listed_read_and_removed_inside_the_folder_alone() {
        let outside = temp();
        std::fs::write(outside.join("secret"), b"not yours").unwrap();
        let dir = temp().join("folder");
        assert!(
            list(dir.clone(), p("")).await.unwrap().is_empty(),
            "not made yet"
        );
        let chunks = futures::stream::iter(
            [&b"hello "[..], &b"world"[..]].map(|c| Ok::<_, std::io::Error>(bytes::Bytes::from(c))),
        );
        assert_eq!(
            write(dir.clone(), p("a/b/note.txt"), chunks, None)
                .await
                .unwrap(),
            11
        );
        let listed = list(dir.clone(), p("a/b")).await.unwrap();
        assert_eq!(listed.len(), 1, "no partial file left: {listed:?}");
        assert_eq!(
            (listed[0].name.as_str(), listed[0].kind, listed[0].size),
            ("note.txt", EntryKind::File, 11)
        );
        let at = readable(dir.clone(), p("a/b/note.txt")).await.unwrap();
        assert_eq!(std::fs::read(at).unwrap(), b"hello world");

        // A link a session made, to outside the folder: listed as a link, never followed.
        std::os::unix::fs::symlink(&outside, dir.join("out")).unwrap();
        std::os::unix::fs::symlink(outside.join("secret"), dir.join("a/s")).unwrap();
        let top = list(dir.clone(), p("")).await.unwrap();
        assert!(
            top.iter()
                .any(|e| e.name == "out" && e.kind == EntryKind::Link),
            "{top:?}"
        );
        assert!(
            matches!(list(dir.clone(), p("out")).await, Err(FilesError::Link(l)) if l == "out")
        );
        assert!(matches!(
            readable(dir.clone(), p("out/secret")).await,
            Err(FilesError::Link(_))
        ));
        assert!(matches!(
            readable(dir.clone(), p("a/s")).await,
            Err(FilesError::Link(_))
        ));
        let none =
            futures::stream::iter([Ok::<_, std::io::Error>(bytes::Bytes::from_static(b"x"))]);
        assert!(matches!(
            write(dir.clone(), p("out/planted"), none, None).await,
            Err(FilesError::Link(_))
        ));
        assert!(!outside.join("planted").exists());
        // Removing a link removes the link alone.
        remove(dir.clone(), p("out")).await.unwrap();
        assert!(outside.join("secret").exists());

        assert!(matches!(
            make_directory(dir.clone(), p("a")).await,
            Err(FilesError::Exists(_))
        ));
        make_directory(dir.clone(), p("c/d")).await.unwrap();
        assert!(dir.join("c/d").is_dir());
        remove(dir.clone(), p("a")).await.unwrap();
        assert!(!dir.join("a").exists());
        assert!(matches!(
            remove(dir.clone(), p("")).await,
            Err(FilesError::Root(_))
        ));
        assert!(matches!(
            readable(dir.clone(), p("c")).await,
            Err(FilesError::IsDirectory(_))
        ));
        assert!(matches!(
            readable(dir.clone(), p("gone")).await,
            Err(FilesError::Missing(_))
        ));
    }

    #[tokio::test]
    async fn a_write_past_the_quota_is_cut_short_and_leaves_nothing_while_one_over_a_file_counts_its_bytes_freed(
    ) {
        let dir = temp().join("folder");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("old"), vec![0u8; 8192]).unwrap();
        let used = usage(dir.clone()).await.unwrap();
        assert!(used >= 8192, "{used}");
        let quota = Some(Quota(used + 4096));
        let body = |n: usize| {
            futures::stream::iter(
                vec![bytes::Bytes::from(vec![7u8; 1024]); n]
                    .into_iter()
                    .map(Ok::<_, std::io::Error>),
            )
        };
        let room = Room::measure(dir.clone(), p("new"), quota).await.unwrap();
        assert!(room.is_some_and(|r| r.admits(4096).is_ok() && r.admits(4097).is_err()));
        assert!(matches!(
            write(dir.clone(), p("new"), body(5), room).await,
            Err(FilesError::Quota(q)) if q.incoming == 5 * 1024
        ));
        let left: Vec<String> = list(dir.clone(), p(""))
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect();
        assert_eq!(left, ["old"], "no partial file kept");
        // Over the old file: its 8 KiB go once the new one is whole, so 12 KiB fit.
        let room = Room::measure(dir.clone(), p("old"), quota).await.unwrap();
        assert_eq!(
            write(dir.clone(), p("old"), body(12), room).await.unwrap(),
            12 * 1024
        );
        assert!(Room::measure(dir.clone(), p("x"), None)
            .await
            .unwrap()
            .is_none());
    }
}
