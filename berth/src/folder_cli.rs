//! `berth folder ...`: a user's folders and their files through the gateway
//! (BERTH_GATEWAY_URL, BERTH_API_KEY): list, create, rename, trash, restore and purge folders,
//! share them with users and projects, list a directory, upload and download files (streamed
//! from and to disk, never held whole), make directories, move and remove entries.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Subcommand;
use futures::StreamExt;
use gateway::model::{FolderListing, Folders};
use reqwest::Method;
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;

use crate::session_cli::{path_part, print_error, show, Client, Output};
use berth::config::Config;

#[derive(Subcommand)]
pub enum FolderCommand {
    /// List my folders, with their volumes and what each held when last measured.
    Ls {
        #[arg(short = 'o', long, value_enum, default_value_t)]
        output: Output,
    },
    /// Create a folder (on the gateway's default volume unless `--volume` names one).
    Create {
        name: String,
        #[arg(long)]
        volume: Option<String>,
        /// What it is for.
        #[arg(long, value_parser = ["general", "model", "data"], default_value = "general")]
        usage: String,
    },
    /// Rename one of my folders (its files move with it, its shares follow).
    Rename { folder: String, to: String },
    /// Clone a folder I reach (mine or shared with me) into a new folder of mine.
    Clone { folder: String, to: String },
    /// Move one of my folders to the trash (nobody reaches it until restored).
    Trash { folder: String },
    /// Bring one of my folders back from the trash.
    Restore { folder: String },
    /// Remove one of my folders in the trash, with its files, for good.
    Purge { folder: String },
    /// List a directory of a folder (the folder itself without PATH).
    Files {
        folder: String,
        path: Option<String>,
        #[arg(short = 'o', long, value_enum, default_value_t)]
        output: Output,
    },
    /// Upload a local file to PATH in the folder (its directories made as needed).
    Upload {
        folder: String,
        file: PathBuf,
        /// Where in the folder (default: the file's name, at the top).
        path: Option<String>,
    },
    /// Download the file at PATH in the folder to a local file (default: its name, here).
    Download {
        folder: String,
        path: String,
        #[arg(long, short = 'O')]
        out: Option<PathBuf>,
    },
    /// Make a directory in the folder (and those above it).
    Mkdir { folder: String, path: String },
    /// Remove a file, link or directory (with all it holds) from the folder.
    Rm { folder: String, path: String },
    /// Start an upload session (SFTP) mounting the folders: prints its id and how to reach
    /// its SFTP server with its key through berth's proxy.
    Sftp {
        #[arg(required = true)]
        folders: Vec<String>,
        /// It ends once this many seconds pass without a byte in or out (10 to 86400;
        /// default 600).
        #[arg(long, value_name = "SECS")]
        idle_timeout: Option<u64>,
    },
    /// Rename or move a file, link or directory inside the folder.
    Mv {
        folder: String,
        from: String,
        to: String,
    },
    /// Share one of my folders with a user or with every member of a project (again: change
    /// what the share allows).
    Share {
        folder: String,
        #[command(flatten)]
        with: Grantee,
        /// `ro`: they read it, and sessions mount it read-only; `rw`: they write it too.
        #[arg(long, value_parser = ["ro", "rw"], default_value = "ro")]
        permission: String,
    },
    /// Take a share of one of my folders back.
    Unshare {
        folder: String,
        #[command(flatten)]
        with: Grantee,
    },
}

/// Whom a folder is shared with: one user, or a project.
#[derive(clap::Args)]
#[group(required = true, multiple = false)]
pub struct Grantee {
    /// A user, by email.
    #[arg(long)]
    user: Option<String>,
    /// Every member of a project.
    #[arg(long)]
    project: Option<String>,
}

impl Grantee {
    /// The share's path under the folder's.
    fn url(&self, folder: &str) -> String {
        let (kind, key) = match (&self.user, &self.project) {
            (Some(email), _) => ("users", email),
            (None, Some(project)) => ("projects", project),
            (None, None) => unreachable!("clap requires one of --user and --project"),
        };
        format!(
            "/v1/folders/{}/shares/{kind}/{}",
            path_part(folder),
            path_part(key)
        )
    }
}

pub async fn run(config: &Config, command: FolderCommand) -> anyhow::Result<ExitCode> {
    let client = Client::new(config)?;
    let result = match command {
        FolderCommand::Ls { output } => client
            .send(client.http.get(client.url("/v1/folders")))
            .await?
            .map(|v| {
                show(output, v, |l: Folders| {
                    println!(
                        "{:<24} {:<8} {:<14} {:>14} {:>14} {:>8}  {:<10} SHARED WITH",
                        "NAME", "USAGE", "VOLUME", "BYTES", "QUOTA", "FILES", "ACCESS"
                    );
                    for f in l.folders {
                        let (bytes, files) = f.usage.map_or(("-".into(), "-".into()), |u| {
                            (u.bytes.to_string(), u.files.to_string())
                        });
                        // Mine: whom I shared it with; another's: whose it is.
                        let shared = if f.permission == "owner" {
                            f.shares
                                .iter()
                                .map(|s| format!("{} {} ({})", s.kind, s.with, s.permission))
                                .collect::<Vec<_>>()
                                .join(", ")
                        } else {
                            format!("(from {})", f.owner)
                        };
                        let access = match f.trashed_at {
                            Some(_) => "in trash",
                            None => f.permission.as_str(),
                        };
                        let quota = f.quota_bytes.map_or("-".into(), |q| q.to_string());
                        println!(
                            "{:<24} {:<8} {:<14} {:>14} {:>14} {:>8}  {:<10} {shared}",
                            f.name, f.usage_mode, f.volume, bytes, quota, files, access
                        );
                    }
                })
            }),
        FolderCommand::Create {
            name,
            volume,
            usage,
        } => {
            let mut body = json!({"name": name, "usage_mode": usage});
            if let Some(volume) = volume {
                body["volume"] = json!(volume);
            }
            client
                .send(client.http.post(client.url("/v1/folders")).json(&body))
                .await?
                .map(|v| {
                    println!(
                        "{}  {}",
                        v["name"].as_str().unwrap_or_default(),
                        v["volume"].as_str().unwrap_or_default()
                    )
                })
        }
        FolderCommand::Files {
            folder,
            path,
            output,
        } => {
            let mut url = format!("/v1/folders/{}/files", path_part(&folder));
            if let Some(path) = path.filter(|p| !p.is_empty()) {
                url.push_str(&format!("?path={}", path_part(&path)));
            }
            client
                .send(client.http.get(client.url(&url)))
                .await?
                .map(|v| {
                    show(output, v, |l: FolderListing| {
                        for e in l.entries {
                            let kind = serde_json::to_value(e.kind).unwrap_or(Value::Null);
                            let modified = e
                                .modified
                                .map(|m| m.format("%Y-%m-%d %H:%M").to_string())
                                .unwrap_or_default();
                            println!(
                                "{:<9} {:>12}  {:<16}  {}",
                                kind.as_str().unwrap_or("?"),
                                e.size,
                                modified,
                                e.name
                            );
                        }
                    })
                })
        }
        FolderCommand::Upload { folder, file, path } => {
            let path = match path {
                Some(path) => path,
                None => file
                    .file_name()
                    .context("the file has no name to upload it under; give PATH")?
                    .to_string_lossy()
                    .into_owned(),
            };
            let opened = tokio::fs::File::open(&file)
                .await
                .with_context(|| format!("open `{}`", file.display()))?;
            let body = reqwest::Body::wrap_stream(tokio_util::io::ReaderStream::new(opened));
            let url = format!(
                "/v1/folders/{}/files?path={}",
                path_part(&folder),
                path_part(&path)
            );
            let response = match client
                .send_raw(client.request(Method::PUT, &url).body(body))
                .await?
            {
                Ok(response) => response,
                Err(code) => return Ok(code),
            };
            let written: Value = response.json().await.unwrap_or(Value::Null);
            println!(
                "{}  {} bytes",
                written["path"].as_str().unwrap_or_default(),
                written["size"]
            );
            Ok(())
        }
        FolderCommand::Download { folder, path, out } => {
            let url = format!(
                "/v1/folders/{}/download?path={}",
                path_part(&folder),
                path_part(&path)
            );
            let response = match client.send_raw(client.request(Method::GET, &url)).await? {
                Ok(response) => response,
                Err(code) => return Ok(code),
            };
            let out = out.unwrap_or_else(|| {
                PathBuf::from(
                    path.rsplit('/')
                        .find(|p| !p.is_empty())
                        .unwrap_or("download"),
                )
            });
            let mut file = tokio::fs::File::create(&out)
                .await
                .with_context(|| format!("create `{}`", out.display()))?;
            let mut bytes = response.bytes_stream();
            let mut written = 0u64;
            while let Some(chunk) = bytes.next().await {
                let chunk = chunk.context("read the download")?;
                file.write_all(&chunk).await?;
                written += chunk.len() as u64;
            }
            file.flush().await?;
            println!("{}  {written} bytes", out.display());
            Ok(())
        }
        FolderCommand::Mkdir { folder, path } => client
            .send(
                client
                    .http
                    .post(client.url(&format!("/v1/folders/{}/directories", path_part(&folder))))
                    .json(&json!({"path": path})),
            )
            .await?
            .map(|_| println!("{path}/")),
        FolderCommand::Rm { folder, path } => {
            let url = format!(
                "/v1/folders/{}/files?path={}",
                path_part(&folder),
                path_part(&path)
            );
            return done(&client, client.request(Method::DELETE, &url), || {
                format!("{path} removed")
            })
            .await;
        }
        FolderCommand::Sftp {
            folders,
            idle_timeout,
        } => client
            .send(
                client
                    .http
                    .post(client.url("/v1/upload-sessions"))
                    .json(&json!({ "folders": folders, "idle_timeout_secs": idle_timeout })),
            )
            .await?
            .map(|v| {
                let id = v["session_id"].as_str().unwrap_or_default();
                println!("{id}");
                eprintln!(
                    "upload session {} requested, mounting {} under /home/work; once it runs:\n  \
                     berth session ssh-key {id} > id_upload && chmod 600 id_upload\n  \
                     sftp -i id_upload -o ProxyCommand=\"berth session app tunnel {id} sshd --stdio\" work@{id}",
                    v["name"].as_str().unwrap_or_default(),
                    folders.join(", ")
                );
            }),
        FolderCommand::Mv { folder, from, to } => {
            let url = format!("/v1/folders/{}/moves", path_part(&folder));
            let request = client
                .request(Method::POST, &url)
                .json(&json!({"from": from, "to": to}));
            return done(&client, request, || format!("{from} -> {to}")).await;
        }
        FolderCommand::Rename { folder, to } => {
            let request = client
                .request(
                    Method::PATCH,
                    &format!("/v1/folders/{}", path_part(&folder)),
                )
                .json(&json!({"name": to}));
            return done(&client, request, || format!("{folder} -> {to}")).await;
        }
        FolderCommand::Clone { folder, to } => client
            .send(
                client
                    .http
                    .post(client.url(&format!("/v1/folders/{}/clone", path_part(&folder))))
                    .json(&json!({ "name": to })),
            )
            .await?
            .map(|v| {
                println!(
                    "{folder} cloned to {}  {}",
                    v["name"].as_str().unwrap_or_default(),
                    v["volume"].as_str().unwrap_or_default()
                )
            }),
        FolderCommand::Trash { folder } => {
            let url = format!("/v1/folders/{}", path_part(&folder));
            return done(&client, client.request(Method::DELETE, &url), || {
                format!(
                    "{folder} moved to the trash (`berth folder restore {folder}` brings it back)"
                )
            })
            .await;
        }
        FolderCommand::Restore { folder } => {
            let url = format!("/v1/folders/{}/restore", path_part(&folder));
            return done(&client, client.request(Method::POST, &url), || {
                format!("{folder} restored")
            })
            .await;
        }
        FolderCommand::Purge { folder } => {
            let url = format!("/v1/folders/{}/purge", path_part(&folder));
            return done(&client, client.request(Method::POST, &url), || {
                format!("{folder} purged, its files removed")
            })
            .await;
        }
        FolderCommand::Share {
            folder,
            with,
            permission,
        } => client
            .send(
                client
                    .http
                    .put(client.url(&with.url(&folder)))
                    .json(&json!({"permission": permission})),
            )
            .await?
            .map(|v| {
                println!(
                    "{folder} shared with {} {} ({})",
                    v["kind"].as_str().unwrap_or_default(),
                    v["with"].as_str().unwrap_or_default(),
                    v["permission"].as_str().unwrap_or_default()
                )
            }),
        FolderCommand::Unshare { folder, with } => {
            return done(
                &client,
                client.request(Method::DELETE, &with.url(&folder)),
                || format!("{folder} no longer shared there"),
            )
            .await;
        }
    };
    Ok(match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(body) => print_error(&body),
    })
}

/// Sends `request`, which answers nothing on success, and prints `said()` then, or the error.
async fn done(
    client: &Client,
    request: reqwest::RequestBuilder,
    said: impl FnOnce() -> String,
) -> anyhow::Result<ExitCode> {
    Ok(match client.send_raw(request).await? {
        Ok(_) => {
            println!("{}", said());
            ExitCode::SUCCESS
        }
        Err(code) => code,
    })
}
