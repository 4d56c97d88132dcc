//! `berth session cp`: files between this machine and a running session's main kernel, as
//! `docker cp` and `kubectl cp` copy them. One side is `SESSION:PATH` (a session's name or id;
//! the path absolute in the container, or relative to `/home/work`), the other a local path.
//! In: a file is streamed as it is (`PUT /v1/sessions/{id}/files`), a directory as a tar
//! archive made on the way into a temporary file. Out: the session answers a tar archive
//! (`GET /v1/sessions/{id}/files`), kept in a temporary file and unpacked where asked: into
//! an existing directory under the source's own name, else at the path given. Nothing is held
//! whole in memory either way.

use std::path::{Component, Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context as _};
use futures::StreamExt;
use reqwest::Method;
use serde_json::Value;
use tokio::io::AsyncWriteExt;

use super::{path_part, Client};

/// One side of a copy.
#[derive(Debug, PartialEq)]
enum Side {
    Local(PathBuf),
    Session { session: String, path: String },
}

/// `SESSION:PATH` is a session's side; anything else (a path with a `/` before any `:`, or
/// no `:`) is local, as `docker cp` reads them.
fn side(text: &str) -> Side {
    match text.split_once(':') {
        Some((session, path)) if !session.is_empty() && !session.contains('/') => Side::Session {
            session: session.to_owned(),
            path: if path.is_empty() {
                ".".into()
            } else {
                path.to_owned()
            },
        },
        _ => Side::Local(PathBuf::from(text)),
    }
}

pub(super) async fn copy(client: &Client, from: &str, to: &str) -> anyhow::Result<ExitCode> {
    match (side(from), side(to)) {
        (Side::Local(local), Side::Session { session, path }) => {
            let id = client.resolve(&session).await?;
            copy_in(client, &id, &local, &path).await
        }
        (Side::Session { session, path }, Side::Local(local)) => {
            let id = client.resolve(&session).await?;
            copy_out(client, &id, &path, &local).await
        }
        _ => bail!("one side is SESSION:PATH and the other a local path"),
    }
}

/// A file of this machine's temporary directory, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Scratch {
        let name = format!("berth-cp-{}.tar", uuid::Uuid::new_v4().simple());
        Scratch(std::env::temp_dir().join(name))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

async fn copy_in(client: &Client, id: &str, local: &Path, path: &str) -> anyhow::Result<ExitCode> {
    let meta = std::fs::metadata(local).with_context(|| format!("read `{}`", local.display()))?;
    let name = local
        .file_name()
        .context("name what to copy (not `.` or `/`)")?
        .to_owned();
    // A file into a directory named as one (`dir/`, `.`): under its own name there.
    let path = match path == "." || path.ends_with('/') {
        true if !meta.is_dir() && path == "." => name.to_string_lossy().into_owned(),
        true if !meta.is_dir() => {
            format!("{}/{}", path.trim_end_matches('/'), name.to_string_lossy())
        }
        _ => path.to_owned(),
    };
    let path = path.as_str();
    let url = format!("/v1/sessions/{id}/files?path={}", path_part(path));
    let (file, length, content_type, _kept) = if meta.is_dir() {
        // A directory goes as an archive of it under its own name, unpacked into PATH.
        let archive = Scratch::new();
        let (source, at) = (local.to_path_buf(), archive.0.clone());
        tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            let mut builder = tar::Builder::new(std::fs::File::create(at)?);
            builder.follow_symlinks(false);
            builder.append_dir_all(&name, &source)?;
            builder.finish()
        })
        .await??;
        let file = tokio::fs::File::open(&archive.0).await?;
        let length = file.metadata().await?.len();
        (file, length, "application/x-tar", Some(archive))
    } else {
        let file = tokio::fs::File::open(local).await?;
        (file, meta.len(), "application/octet-stream", None)
    };
    let body = reqwest::Body::wrap_stream(tokio_util::io::ReaderStream::new(file));
    let request = client
        .request(Method::PUT, &url)
        .header(reqwest::header::CONTENT_TYPE, content_type)
        .header(reqwest::header::CONTENT_LENGTH, length)
        .body(body);
    let response = match client.send_raw(request).await? {
        Ok(response) => response,
        Err(code) => return Ok(code),
    };
    let written: Value = response.json().await.unwrap_or(Value::Null);
    println!(
        "{} -> {}  {length} bytes",
        local.display(),
        written["path"].as_str().unwrap_or(path)
    );
    Ok(ExitCode::SUCCESS)
}

async fn copy_out(client: &Client, id: &str, path: &str, local: &Path) -> anyhow::Result<ExitCode> {
    let url = format!("/v1/sessions/{id}/files?path={}", path_part(path));
    let response = match client.send_raw(client.request(Method::GET, &url)).await? {
        Ok(response) => response,
        Err(code) => return Ok(code),
    };
    let archive = Scratch::new();
    let mut file = tokio::fs::File::create(&archive.0).await?;
    let mut bytes = response.bytes_stream();
    while let Some(chunk) = bytes.next().await {
        file.write_all(&chunk.context("read the archive")?).await?;
    }
    file.flush().await?;
    let dest = local.to_path_buf();
    let (files, bytes) = tokio::task::spawn_blocking(move || unpack(&archive.0, &dest)).await??;
    println!(
        "{path} -> {}  {files} files, {bytes} bytes",
        local.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// Unpacks the session's archive of a file or directory at `dest`: into it under the
/// source's own name when `dest` is a directory, else as `dest` itself. Entries whose path
/// would leave that place (`..`, absolute) are refused. Answers the files and bytes written.
fn unpack(archive: &Path, dest: &Path) -> anyhow::Result<(u64, u64)> {
    let mut read = tar::Archive::new(std::fs::File::open(archive)?);
    let (mut root, mut files, mut bytes) = (None::<PathBuf>, 0, 0);
    for entry in read.entries()? {
        let mut entry = entry?;
        let path = entry.path()?.into_owned();
        if !path.components().all(|c| matches!(c, Component::Normal(_))) {
            bail!(
                "the archive names `{}`, outside where it unpacks",
                path.display()
            );
        }
        let mut parts = path.components();
        let first = parts.next().context("an entry without a name")?;
        let root = root.get_or_insert_with(|| match dest.is_dir() {
            true => dest.join(first),
            false => dest.to_path_buf(),
        });
        let rest = parts.as_path();
        let out = match rest.as_os_str().is_empty() {
            true => root.clone(),
            false => root.join(rest),
        };
        if let Some(parent) = out.parent() {
            std::fs::create_dir_all(parent)?;
        }
        if entry.header().entry_type().is_file() {
            files += 1;
            bytes += entry.size();
        }
        entry.unpack(&out)?;
    }
    Ok((files, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_side_is_session_colon_path_and_the_rest_is_local() {
        assert_eq!(
            side("job1:/tmp/a"),
            Side::Session {
                session: "job1".into(),
                path: "/tmp/a".into()
            }
        );
        assert_eq!(
            side("job1:"),
            Side::Session {
                session: "job1".into(),
                path: ".".into()
            }
        );
        assert_eq!(side("./a:b"), Side::Local("./a:b".into()));
        assert_eq!(side("plain.txt"), Side::Local("plain.txt".into()));
    }

    #[test]
    fn an_archive_unpacks_into_a_directory_under_its_name_or_at_the_path_given() {
        let scratch =
            std::env::temp_dir().join(format!("berth-cp-test-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&scratch).unwrap();
        let dir = Scratch(scratch);
        let archive = dir.0.join("a.tar");
        {
            let mut builder = tar::Builder::new(std::fs::File::create(&archive).unwrap());
            let mut header = tar::Header::new_gnu();
            header.set_size(3);
            header.set_mode(0o644);
            builder
                .append_data(&mut header, "out/sub/x.txt", &b"abc"[..])
                .unwrap();
            builder.finish().unwrap();
        }
        let into = dir.0.join("into");
        std::fs::create_dir(&into).unwrap();
        assert_eq!(unpack(&archive, &into).unwrap(), (1, 3));
        assert_eq!(std::fs::read(into.join("out/sub/x.txt")).unwrap(), b"abc");
        let at = dir.0.join("renamed");
        unpack(&archive, &at).unwrap();
        assert_eq!(std::fs::read(at.join("sub/x.txt")).unwrap(), b"abc");

        let evil = dir.0.join("evil.tar");
        {
            let mut file = std::fs::File::create(&evil).unwrap();
            let mut header = tar::Header::new_gnu();
            header.set_size(1);
            header.set_mode(0o644);
            // Written raw: the tar crate refuses to write `..` itself.
            header.as_old_mut().name[..9].copy_from_slice(b"../escape");
            header.set_cksum();
            std::io::Write::write_all(&mut file, header.as_bytes()).unwrap();
            std::io::Write::write_all(&mut file, &[b'x'; 512]).unwrap();
            std::io::Write::write_all(&mut file, &[0; 1024]).unwrap();
        }
        assert!(unpack(&evil, &into).is_err());
        assert!(!dir.0.join("escape").exists());
        std::fs::remove_dir_all(&dir.0).unwrap();
    }
}
