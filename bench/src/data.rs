//! `berth bench data`: a file uploaded to a folder and downloaded from it through the
//! gateway's files API (`PUT /v1/folders/{name}/files`, `GET .../download`), next to the same
//! bytes over raw loopback HTTP (a bare axum server on this process: tower-http's `ServeFile`
//! out, the body streamed to a file in) and next to `cp` on the same disk, measured in the same
//! run, round by round with the order turned about, each round to a new name (a file the
//! upload replaced would add the file system's freeing of it); and the process's peak
//! resident memory growth while each transfer ran (the kernel's high-water mark, reset before
//! each: `/proc/self/clear_refs`), which stays flat when nothing holds a file whole. A
//! resumable upload (tus) is measured too: its first request cut half way through the body,
//! then resumed from where the gateway says it stopped, and its file's SHA-256 compared with
//! the source's.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use axum::body::Body;
use axum::extract::{Path as UrlPath, Request};
use futures::StreamExt;
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tower::ServiceExt;

/// One transfer's time and the memory the process grew by at its peak.
#[derive(Default)]
struct Runs {
    seconds: Vec<f64>,
    grew_mib: Vec<f64>,
}

impl Runs {
    fn median_rate(&self, mib: u32) -> f64 {
        let mut s = self.seconds.clone();
        s.sort_by(f64::total_cmp);
        mib as f64 / s[s.len() / 2]
    }

    fn most_grown(&self) -> f64 {
        self.grew_mib.iter().copied().fold(0.0, f64::max)
    }
}

/// A `/proc/self/status` figure in KiB.
fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

/// Runs `transfer`, timed, with the peak resident memory reset before it.
async fn measured<F: std::future::Future<Output = anyhow::Result<()>>>(
    runs: &mut Runs,
    transfer: F,
) -> anyhow::Result<()> {
    // Writing 5 resets the peak resident size to the current one (proc(5)).
    std::fs::write("/proc/self/clear_refs", "5").context("reset the peak resident size")?;
    let before = status_kib("VmRSS:");
    let started = Instant::now();
    transfer.await?;
    runs.seconds.push(started.elapsed().as_secs_f64());
    let peak = status_kib("VmHWM:");
    runs.grew_mib
        .push(peak.saturating_sub(before) as f64 / 1024.0);
    Ok(())
}

async fn upload(http: &reqwest::Client, url: &str, key: &str, file: &Path) -> anyhow::Result<()> {
    let body = reqwest::Body::wrap_stream(tokio_util::io::ReaderStream::with_capacity(
        tokio::fs::File::open(file).await?,
        256 << 10,
    ));
    let answer = http
        .put(url)
        .header("x-api-key", key)
        .body(body)
        .send()
        .await?;
    anyhow::ensure!(
        answer.status().is_success(),
        "PUT {url}: {}",
        answer.status()
    );
    Ok(())
}

async fn download(http: &reqwest::Client, url: &str, key: &str, bytes: u64) -> anyhow::Result<()> {
    let answer = http.get(url).header("x-api-key", key).send().await?;
    anyhow::ensure!(
        answer.status().is_success(),
        "GET {url}: {}",
        answer.status()
    );
    let mut got = 0u64;
    let mut stream = answer.bytes_stream();
    while let Some(chunk) = stream.next().await {
        got += chunk?.len() as u64;
    }
    anyhow::ensure!(got == bytes, "GET {url}: {got} bytes of {bytes}");
    Ok(())
}

/// A resumable upload (tus) of `file` to `path` of the folder `bench`, its first request
/// dropped half way through the body (the client's stream fails there, so the connection is
/// cut as a lost network cuts it), then asked where it is and sent from there to its end.
/// Answers where the first request left it.
async fn resumable_upload(
    http: &reqwest::Client,
    base: &str,
    key: &str,
    path: &str,
    file: &Path,
    bytes: u64,
) -> anyhow::Result<u64> {
    use tokio::io::AsyncSeekExt;
    let made = http
        .post(format!("{base}/v1/folders/bench/uploads?path={path}"))
        .header("x-api-key", key)
        .header("upload-length", bytes)
        .send()
        .await?;
    anyhow::ensure!(
        made.status().is_success(),
        "make the upload: {}",
        made.status()
    );
    let upload = format!(
        "{base}{}",
        made.headers()["location"]
            .to_str()
            .context("its location")?
    );
    let half = bytes / 2;
    let cut = tokio_util::io::ReaderStream::with_capacity(
        tokio::io::AsyncReadExt::take(tokio::fs::File::open(file).await?, half),
        256 << 10,
    )
    .chain(futures::stream::once(async {
        Err(std::io::Error::other("the network went away"))
    }));
    let dropped = http
        .patch(&upload)
        .header("content-type", "application/offset+octet-stream")
        .header("upload-offset", 0)
        .header("content-length", bytes)
        .body(reqwest::Body::wrap_stream(cut))
        .send()
        .await;
    anyhow::ensure!(dropped.is_err(), "the first request was not cut");
    let mut tries = 0;
    loop {
        let asked = http.head(&upload).send().await?;
        let offset: u64 = asked.headers()["upload-offset"].to_str()?.parse()?;
        let mut rest = tokio::fs::File::open(file).await?;
        rest.seek(std::io::SeekFrom::Start(offset)).await?;
        let sent = http
            .patch(&upload)
            .header("content-type", "application/offset+octet-stream")
            .header("upload-offset", offset)
            .header("content-length", bytes - offset)
            .body(reqwest::Body::wrap_stream(
                tokio_util::io::ReaderStream::with_capacity(rest, 256 << 10),
            ))
            .send()
            .await;
        let sent = match sent {
            Ok(sent) => sent,
            // Refused before its body was read (the cut request is still being wound up),
            // the connection closed while the body was still going out: asked again.
            Err(e) if e.is_request() && tries < 100 => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        match sent.status() {
            reqwest::StatusCode::NO_CONTENT => return Ok(offset),
            // The cut request is still being wound up on the server.
            reqwest::StatusCode::CONFLICT if tries < 100 => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => anyhow::bail!("PATCH {upload}: {other}"),
        }
    }
}

/// The SHA-256 of a file, read in MiB blocks.
fn sha256_of(file: &Path) -> anyhow::Result<Vec<u8>> {
    use sha2::Digest;
    use std::io::Read;
    let mut hasher = sha2::Sha256::new();
    let mut reader = std::fs::File::open(file)?;
    let mut block = vec![0; 1 << 20];
    loop {
        let n = reader.read(&mut block)?;
        if n == 0 {
            return Ok(hasher.finalize().to_vec());
        }
        hasher.update(&block[..n]);
    }
}

/// The raw HTTP server the gateway is measured against: files of `dir` by name, out by
/// tower-http's `ServeFile`, in by the body streamed to a file.
async fn raw_server(dir: PathBuf) -> anyhow::Result<String> {
    use axum::routing::get;
    let out = dir.clone();
    let app = axum::Router::new().route(
        "/{name}",
        get(move |UrlPath(name): UrlPath<String>, request: Request| {
            let file = out.join(name);
            async move {
                tower_http::services::ServeFile::new(file)
                    .oneshot(request)
                    .await
                    .map(|r| r.map(Body::new))
            }
        })
        .put(move |UrlPath(name): UrlPath<String>, body: Body| {
            let file = dir.join(name);
            async move {
                let file = tokio::fs::File::create(file)
                    .await
                    .map_err(|e| e.to_string())?;
                // As the gateway writes: a MiB at a time.
                let mut out = tokio::io::BufWriter::with_capacity(1 << 20, file);
                let mut stream = body.into_data_stream();
                while let Some(chunk) = stream.next().await {
                    out.write_all(&chunk.map_err(|e| e.to_string())?)
                        .await
                        .map_err(|e| e.to_string())?;
                }
                out.flush().await.map_err(|e| e.to_string())?;
                out.get_ref().sync_all().await.map_err(|e| e.to_string())?;
                Ok::<_, String>("written")
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(base)
}

pub async fn data(url: &str, mib: u32, rounds: usize) -> anyhow::Result<()> {
    let pool = events::store::pool(url, 8)?;
    berth::app::migrate(&pool).await?;
    launcher::access::bootstrap(&pool).await?;
    let (owner, key) = launcher::access::create_user(
        &pool,
        &format!("data{}@berth.local", uuid::Uuid::new_v4().simple()),
        events::payloads::Role::User,
        "default",
        &[],
    )
    .await?;
    let root = std::env::temp_dir().join(format!(
        "berth-bench-data-{}",
        uuid::Uuid::new_v4().simple()
    ));
    let raw_dir = root.join("raw");
    std::fs::create_dir_all(&raw_dir)?;
    let roots = [(domain_host_local(), root.join("volume"))]
        .into_iter()
        .collect();
    let state = gateway::AppState::new(pool.clone(), None, events::relay::Topology::default())
        .with_file_roots(roots);
    let stop = tokio_util::sync::CancellationToken::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    tokio::spawn(gateway::run::serve(listener.into(), state, stop.clone()));
    let raw = raw_server(raw_dir.clone()).await?;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(600))
        .build()?;
    let made = http
        .post(format!("{base}/v1/folders"))
        .header("x-api-key", &key)
        .json(&json!({"name": "bench"}))
        .send()
        .await?;
    anyhow::ensure!(made.status().is_success(), "the folder: {}", made.status());

    // The source: `mib` MiB of bytes that do not compress, written once.
    let source = root.join("source");
    {
        let mut file = tokio::fs::File::create(&source).await?;
        let block: Vec<u8> = (0..1u32 << 20)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for _ in 0..mib {
            file.write_all(&block).await?;
        }
        file.sync_all().await?;
    }
    let bytes = u64::from(mib) << 20;
    println!("berth bench data: {mib} MiB, {rounds} rounds (median of each), loopback");
    let (mut bu, mut bd, mut ru, mut rd, mut cp, mut tus) = Default::default();
    let source_sha = sha256_of(&source)?;
    let mut cut_at = Vec::new();
    for round in 0..rounds {
        // A new name each round, removed after it outside the timing: the transfer is
        // measured, not the file system freeing a GiB the upload would replace.
        let name = format!("big-{round}.bin");
        let berth_put = format!("{base}/v1/folders/bench/files?path={name}");
        let berth_get = format!("{base}/v1/folders/bench/download?path={name}");
        let raw_url = format!("{raw}/{name}");
        let copied = root.join(&name);
        let berth_first = round % 2 == 0;
        for berth_turn in [berth_first, !berth_first] {
            if berth_turn {
                measured(&mut bu, upload(&http, &berth_put, &key, &source)).await?;
                measured(&mut bd, download(&http, &berth_get, &key, bytes)).await?;
            } else {
                measured(&mut ru, upload(&http, &raw_url, &key, &source)).await?;
                measured(&mut rd, download(&http, &raw_url, &key, bytes)).await?;
            }
        }
        let resumed = format!("resumed-{round}.bin");
        let mut left_at = 0;
        measured(&mut tus, async {
            left_at = resumable_upload(&http, &base, &key, &resumed, &source, bytes).await?;
            Ok(())
        })
        .await?;
        cut_at.push(left_at);
        let landed = root
            .join("volume/folders")
            .join(format!("{}", owner.simple()))
            .join("bench")
            .join(&resumed);
        anyhow::ensure!(
            sha256_of(&landed)? == source_sha,
            "the resumed upload's bytes differ from the source's"
        );
        std::fs::remove_file(&landed)?;
        let (from, to) = (source.clone(), copied.clone());
        measured(&mut cp, async move {
            tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
                std::fs::copy(&from, &to)?;
                std::fs::File::open(&to)?.sync_all()?;
                Ok(())
            })
            .await?
        })
        .await?;
        let removed = http
            .delete(format!("{base}/v1/folders/bench/files?path={name}"))
            .header("x-api-key", &key)
            .send()
            .await?;
        anyhow::ensure!(
            removed.status().is_success(),
            "DELETE: {}",
            removed.status()
        );
        std::fs::remove_file(raw_dir.join(&name))?;
        std::fs::remove_file(&copied)?;
    }
    let (bu_rate, bd_rate, ru_rate, rd_rate) = (
        bu.median_rate(mib),
        bd.median_rate(mib),
        ru.median_rate(mib),
        rd.median_rate(mib),
    );
    println!("  | transfer | berth (files API) | raw HTTP | berth / raw | `cp` |");
    println!("  |---|---|---|---|---|");
    println!(
        "  | upload | {bu_rate:.0} MiB/s | {ru_rate:.0} MiB/s | {:.0}% | {:.0} MiB/s |",
        100.0 * bu_rate / ru_rate,
        cp.median_rate(mib)
    );
    println!(
        "  | download | {bd_rate:.0} MiB/s | {rd_rate:.0} MiB/s | {:.0}% | |",
        100.0 * bd_rate / rd_rate
    );
    let tus_rate = tus.median_rate(mib);
    println!(
        "  | resumable upload (tus), cut at half and resumed | {tus_rate:.0} MiB/s | {ru_rate:.0} MiB/s | {:.0}% | |",
        100.0 * tus_rate / ru_rate
    );
    println!(
        "  the cut requests left the uploads at {} MiB; every resumed file's SHA-256 equals the source's; \
         peak resident growth during a resumable upload {:.1} MiB",
        cut_at
            .iter()
            .map(|b| format!("{:.0}", *b as f64 / f64::from(1 << 20)))
            .collect::<Vec<_>>()
            .join(", "),
        tus.most_grown()
    );
    println!(
        "  peak resident growth of the process (gateway and client both) during a transfer: \
         berth upload {:.1} MiB, download {:.1} MiB; raw upload {:.1} MiB, download {:.1} MiB",
        bu.most_grown(),
        bd.most_grown(),
        ru.most_grown(),
        rd.most_grown()
    );
    stop.cancel();
    let _ = std::fs::remove_dir_all(&root);
    Ok(())
}

fn domain_host_local() -> String {
    events::volumes::HOST_LOCAL.to_owned()
}
