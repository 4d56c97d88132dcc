//! `berth bench backendai`: what Backend.AI's compatibility costs, each figure next to berth's
//! own way of doing the same in the same run.
//!
//! - A signed request's verification alone (three HMAC-SHA256 and a compare), next to an API
//!   key's (one SHA-256), in process.
//! - A request through the gateway's own extractors over HTTP, signed with a Backend.AI keypair
//!   (`BackendAiCaller`) next to one with an API key (`Caller`), each to a handler that only
//!   answers `ok`: the same work but the authentication.
//! - Backend.AI's own `backend.ai ps` over one user's 1,000 sessions, next to `berth session
//!   ls` (the `berth` binary) over the same sessions, as a person runs them: each a new process;
//!   and the GraphQL list query the CLI sends, alone, next to berth's JSON list of a page.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use chrono::Utc;
use events::payloads::Role;
use gateway::backendai::auth::{self, Signed};
use serde_json::{json, Value};

use crate::sessions::percentile;

/// The GraphQL list query `backend.ai ps` sends, with its default fields.
const PS_QUERY: &str = "query($limit:Int!, $offset:Int!, $status: String, $access_key: String, \
    $filter: String, $order: String) {\n  compute_session_list(\n      limit:$limit, \
    offset:$offset, status:$status, access_key:$access_key, filter:$filter, order:$order) {\n    \
    items { name id group_name main_kernel_id image type status status_info status_changed \
    result }\n    total_count\n  }\n}";

const PS_STATUSES: &str =
    "PENDING,SCHEDULED,PULLING,PREPARING,RUNNING,RUNNING_DEGRADED,TERMINATING,ERROR";

pub async fn backendai(
    url: &str,
    sessions: usize,
    requests: usize,
    runs: usize,
    client_dir: &Path,
) -> anyhow::Result<()> {
    println!("berth bench backendai: {requests} requests each way, {runs} runs of each CLI over {sessions} sessions");
    verification(requests * 100);

    let pool = events::store::pool(url, 16)?;
    berth::app::migrate(&pool).await?;
    crate::sessions::fill(&pool, 10, 0).await?;
    let email = "ps@berth.local";
    let (_, api_key) =
        launcher::access::create_user(&pool, email, Role::User, "default", &["default".into()])
            .await?;
    let (_, access_key) = launcher::access::issue_backendai_keypair(&pool, email).await?;
    let owner = {
        let client = pool.get().await?;
        events::ledger::key_owner(&client, &api_key)
            .await?
            .context("the key was just issued")?
    };
    for _ in 0..sessions.div_ceil(100) {
        let request = launcher::launch::CreateSession {
            image: "berth/shell:latest".into(),
            count: Some(100),
            resources: launcher::launch::ResourceRequest {
                cpu: Some(1.0),
                memory: Some(launcher::launch::ByteSize::Bytes(1 << 30)),
                ..Default::default()
            },
            ..Default::default()
        };
        launcher::launch::launch(&pool, &owner, request).await?;
    }
    let view = gateway::projection::SessionsView;
    events::projection::install(&pool, &view).await?;
    events::projection::catch_up(&pool, &view).await?;

    let master = b"the bench's master key, thirty-two bytes or more".to_vec();
    let secret_key = gateway::handles::derive_secret(&master, &access_key);
    let state = gateway::AppState::new(pool.clone(), None, events::relay::Topology::default())
        .with_backendai(master);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    let base = format!("http://{address}");
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(gateway::run::serve(
        listener.into(),
        state.clone(),
        stop.clone(),
    ));
    let http = reqwest::Client::new();
    let signer = Signer {
        host: address.to_string(),
        access_key: access_key.clone(),
        secret_key: secret_key.clone(),
    };

    // The two extractors alone, each in front of a handler that answers `ok`.
    let auth_only = axum::Router::new()
        .route(
            "/key",
            axum::routing::get(|_: gateway::caller::Caller| async { "ok" }),
        )
        .route(
            "/signed",
            axum::routing::get(|_: gateway::backendai::BackendAiCaller| async { "ok" }),
        )
        .with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let auth_address = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, auth_only).await });
    let auth_signer = Signer {
        host: auth_address.to_string(),
        ..signer.clone()
    };
    // Warm both paths (the key caches, the connection), then alternate them.
    let mut keyed = Vec::with_capacity(requests);
    let mut signed = Vec::with_capacity(requests);
    for round in 0..requests + 20 {
        let started = Instant::now();
        let r = http
            .get(format!("http://{auth_address}/key"))
            .header("x-api-key", &api_key)
            .send()
            .await?;
        anyhow::ensure!(r.status().is_success(), "API key: {}", r.status());
        r.bytes().await?;
        let api = started.elapsed();
        let started = Instant::now();
        let r = auth_signer
            .sign(
                http.get(format!("http://{auth_address}/signed")),
                "GET",
                "/signed",
                None,
            )
            .send()
            .await?;
        anyhow::ensure!(r.status().is_success(), "signed: {}", r.status());
        r.bytes().await?;
        let hmac = started.elapsed();
        if round >= 20 {
            keyed.push(api);
            signed.push(hmac);
        }
    }
    report("API key (X-API-Key), a handler that answers ok", &mut keyed);
    report(
        "Backend.AI keypair (HMAC-SHA256 signed), the same handler",
        &mut signed,
    );

    // The page `ps` asks for, through the gateway alone.
    let mut gql = Vec::with_capacity(runs * 10);
    let mut list = Vec::with_capacity(runs * 10);
    let body = json!({"query": PS_QUERY, "variables": {"limit": 20, "offset": 0,
        "status": PS_STATUSES, "access_key": null, "filter": null, "order": null}});
    for round in 0..runs * 10 + 5 {
        let started = Instant::now();
        let r = signer
            .sign(
                http.post(format!("{base}/admin/gql")),
                "POST",
                "/admin/gql",
                Some("application/json"),
            )
            .json(&body)
            .send()
            .await?;
        let answer: Value = r.json().await?;
        let took = started.elapsed();
        anyhow::ensure!(
            answer["data"]["compute_session_list"]["total_count"]
                == json!(sessions.div_ceil(100) * 100),
            "the GraphQL list: {answer}"
        );
        let started = Instant::now();
        let r = http
            .get(format!("{base}/v1/sessions?state=running&limit=20"))
            .header("x-api-key", &api_key)
            .send()
            .await?;
        anyhow::ensure!(r.status().is_success(), "list: {}", r.status());
        r.bytes().await?;
        if round >= 5 {
            gql.push(took);
            list.push(started.elapsed());
        }
    }
    report("berth: GET /v1/sessions (a page of 20)", &mut list);
    report(
        "Backend.AI: POST /admin/gql compute_session_list (a page of 20)",
        &mut gql,
    );

    // Both CLIs, each run a new process, as a person types them.
    let program = {
        let dir = client_dir.to_path_buf();
        tokio::task::spawn_blocking(move || testkit::backendai_client::install(&dir)).await??
    };
    let home = std::env::temp_dir().join(format!("berth-bench-bai-{}", std::process::id()));
    std::fs::create_dir_all(&home)?;
    let berth = crate::berth_binary()?;
    let mut ps = Vec::with_capacity(runs);
    let mut ls = Vec::with_capacity(runs);
    let mut start_only = Vec::with_capacity(runs);
    for round in 0..runs + 1 {
        // The client's own start: `config` prints its settings and asks the server nothing.
        let started = Instant::now();
        let out = cli(&program, &home)
            .arg("config")
            .env("BACKEND_ENDPOINT", &base)
            .output()
            .await?;
        anyhow::ensure!(
            out.status.success(),
            "backend.ai config: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        if round >= 1 {
            start_only.push(started.elapsed());
        }
        let started = Instant::now();
        let out = cli(&program, &home)
            .arg("ps")
            .env("BACKEND_ENDPOINT", &base)
            .env("BACKEND_ENDPOINT_TYPE", "api")
            .env("BACKEND_ACCESS_KEY", &access_key)
            .env("BACKEND_SECRET_KEY", &secret_key)
            .output()
            .await?;
        let took = started.elapsed();
        anyhow::ensure!(
            out.status.success() && String::from_utf8_lossy(&out.stdout).contains("PENDING"),
            "backend.ai ps: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let started = Instant::now();
        let out = cli(&berth, &home)
            .args(["session", "ls", "--limit", "20"])
            .env("BERTH_GATEWAY_URL", &base)
            .env("BERTH_API_KEY", &api_key)
            .output()
            .await?;
        anyhow::ensure!(
            out.status.success(),
            "berth session ls: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        if round >= 1 {
            ps.push(took);
            ls.push(started.elapsed());
        }
    }
    report("berth session ls (new process, a page of 20)", &mut ls);
    report("backend.ai ps (new process, a page of 20)", &mut ps);
    report(
        "of which the client's own start: backend.ai config (new process, no request)",
        &mut start_only,
    );
    let _ = std::fs::remove_dir_all(&home);
    stop.cancel();
    Ok(())
}

/// The install `berth bench backendai` uses unless told another.
pub fn default_client_dir() -> PathBuf {
    PathBuf::from(".berth/backendai-client-23.9.10")
}

fn cli(program: &Path, home: &Path) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(program);
    command
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("LANG", "C.UTF-8")
        .current_dir(home)
        .stdin(std::process::Stdio::null());
    command
}

/// Signs requests as Backend.AI's client does.
#[derive(Clone)]
struct Signer {
    host: String,
    access_key: String,
    secret_key: String,
}

impl Signer {
    fn sign(
        &self,
        request: reqwest::RequestBuilder,
        method: &str,
        target: &str,
        content_type: Option<&str>,
    ) -> reqwest::RequestBuilder {
        let date = auth::client_date(Utc::now());
        let authorization = Signed {
            method,
            target,
            date: &date,
            host: &self.host,
            content_type,
            version: auth::API_VERSION,
        }
        .authorization(&self.access_key, &self.secret_key)
        .expect("a date the client writes reads back");
        let request = request
            .header("date", &date)
            .header("x-backendai-version", auth::API_VERSION)
            .header("authorization", authorization);
        match content_type {
            Some(t) => request.header("content-type", t),
            None => request,
        }
    }
}

/// The verification alone, in process: what the gateway computes per signed request, next
/// to what it computes per API-key request.
fn verification(rounds: usize) {
    let secret = gateway::handles::derive_secret(
        b"a master key of thirty-two bytes!",
        "AKIABENCH0000000001",
    );
    let now = Utc::now();
    let date = auth::client_date(now);
    let now = now.fixed_offset();
    let signed = Signed {
        method: "GET",
        target: "/session/bench/logs",
        date: &date,
        host: "127.0.0.1:8480",
        content_type: Some("text/plain"),
        version: auth::API_VERSION,
    };
    let started = Instant::now();
    let mut last = [0u8; 32];
    for _ in 0..rounds {
        last = std::hint::black_box(signed.signature(std::hint::black_box(&secret), now));
    }
    let hmac = started.elapsed();
    let key = launcher::access::new_api_key();
    let started = Instant::now();
    let mut digest = String::new();
    for _ in 0..rounds {
        digest = std::hint::black_box(events::ledger::key_digest(std::hint::black_box(&key)));
    }
    let sha = started.elapsed();
    let per = |d: Duration| d.as_secs_f64() * 1e9 / rounds as f64;
    println!(
        "  in process, per request: API key digest (SHA-256) {:.0} ns; Backend.AI signature \
         (3 HMAC-SHA256) {:.0} ns ({} and {} computed {rounds} times)",
        per(sha),
        per(hmac),
        &digest[..8],
        &hex::encode(last)[..8]
    );
}

fn report(what: &str, times: &mut [Duration]) {
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "  {what}: p50 {:.2} ms, p99 {:.2} ms ({} runs)",
        ms(percentile(times, 0.5)),
        ms(percentile(times, 0.99)),
        times.len()
    );
}
