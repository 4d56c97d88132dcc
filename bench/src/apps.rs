//! `berth bench apps`: berth's app proxy next to the same requests sent straight to the
//! container's published port, in one run, taking turns: the latency of a small request, and
//! the throughput of a 100 MB download; then the terminal's keystroke echo through the proxy,
//! and the time from asking for JupyterLab to its first page.
//!
//! The whole control plane runs in this process (`berth::app`, the gateway's proxy among it)
//! with a Docker agent, on a database and streams of the bench's own.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use berth::app::{self, Parts};
use berth::config::Config;
use events::payloads::ResourceSlots;
use serde_json::{json, Value};

use crate::sessions::{bench_docker_agent, bench_engine, percentile, remove_agent_leftovers};

const IMAGE: &str = "berth/jupyter:latest";
/// A web server in the session: a small file and a 100 MB one, on the preopen port.
const SERVER: &str =
    "cd /tmp && head -c 100 /dev/zero > small && head -c 100000000 /dev/zero > big \
                      && exec python3 -m http.server 8080";

struct Api {
    http: reqwest::Client,
    base: String,
    key: String,
}

impl Api {
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Value,
    ) -> anyhow::Result<Value> {
        let answer = self
            .http
            .request(method, format!("{}{path}", self.base))
            .header("x-api-key", &self.key)
            .json(&body)
            .send()
            .await?;
        let status = answer.status();
        let body: Value = answer.json().await.unwrap_or(Value::Null);
        anyhow::ensure!(status.is_success(), "{path}: {status} {body}");
        Ok(body)
    }
}

/// The first of `n` neighbouring ports nothing listens on now, for the proxy's pool.
fn free_ports(n: u16) -> u16 {
    loop {
        let first = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap_or(20000);
        let free = |p: u16| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok();
        if first < 65535 - n && (1..n).all(|i| free(first + i)) {
            return first;
        }
    }
}

pub async fn apps(base: &Config, url: &str, requests: usize) -> anyhow::Result<()> {
    let id = std::process::id();
    let mut config = base.clone();
    config.database_url = url.to_owned();
    config.gateway_listen = "127.0.0.1:0".into();
    config.topology = events::relay::Topology {
        stream: format!("BENCH_{id}"),
        prefix: format!("bench{id}.evt"),
    };
    config.agent_bus = bus::Subjects {
        root: format!("bench{id}"),
        commands_stream: format!("BENCH_CMDS_{id}"),
        telemetry_stream: format!("BENCH_TEL_{id}"),
    };
    let first = free_ports(4);
    config.proxy_ports = Some((first, first + 3));
    let platform = app::start(&config, Parts::ALL).await?;
    let (_, key) = platform
        .first_superadmin
        .clone()
        .context("a fresh bench database")?;
    let api = Api {
        http: reqwest::Client::new(),
        base: format!(
            "http://{}",
            platform.gateway.context("the gateway listens")?
        ),
        key,
    };

    let engine = bench_engine(IMAGE).await?;
    let agent_id = format!("apps{id}");
    let stop = tokio_util::sync::CancellationToken::new();
    let nats = bus::link::connect_as_url_says(&config.nats_url).await?;
    let capacity = ResourceSlots {
        cpu_milli: 8_000,
        memory_bytes: 8 << 30,
        gpu_milli: 0,
    };
    // It runs until `stop`.
    bench_docker_agent(
        &platform.pool,
        &agent_id,
        capacity,
        &engine,
        nats,
        config.agent_bus.clone(),
        &stop,
    )
    .await?;
    tokio::time::sleep(Duration::from_millis(500)).await;

    let created = api
        .call(
            reqwest::Method::POST,
            "/v1/sessions",
            json!({"image": IMAGE, "preopen_ports": [8080], "startup_command": SERVER,
                   "resources": {"cpu": 2, "memory": "2g"}}),
        )
        .await?;
    let session = created["sessions"][0]["session_id"]
        .as_str()
        .map(str::to_owned)
        .with_context(|| format!("a created session in {created}"))?;
    let waited = Instant::now();
    let detail = loop {
        let detail = api
            .call(
                reqwest::Method::GET,
                &format!("/v1/sessions/{session}"),
                json!(null),
            )
            .await?;
        if detail["status"] == "RUNNING" {
            break detail;
        }
        anyhow::ensure!(
            waited.elapsed() < Duration::from_secs(60),
            "the session did not run"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let published = detail["containers"][0]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["container"] == 8080)
        .and_then(|p| p["host"].as_u64())
        .context("port 8080 published")?;
    let opened = api
        .call(
            reqwest::Method::POST,
            &format!("/v1/sessions/{session}/apps/8080/open"),
            json!({"public": true}),
        )
        .await?;
    let proxied = opened["port"].as_u64().context("a proxy port")?;
    let direct_url = format!("http://127.0.0.1:{published}");
    let proxy_url = format!("http://127.0.0.1:{proxied}");
    // The server writes its files first: wait until the big one is served whole.
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(1)
        .build()?;
    let waited = Instant::now();
    loop {
        // The small file is written after the big one, so once it is served both are whole.
        let ready = client.get(format!("{direct_url}/small")).send().await;
        if ready.is_ok_and(|r| r.status().is_success()) {
            break;
        }
        anyhow::ensure!(
            waited.elapsed() < Duration::from_secs(60),
            "the server did not come up"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Small requests, taking turns, each side on a kept-alive connection of its own.
    let (via_proxy, straight) = (reqwest::Client::new(), reqwest::Client::new());
    let mut proxy_ms = Vec::with_capacity(requests);
    let mut direct_ms = Vec::with_capacity(requests);
    for round in 0..requests + 20 {
        for (client, base, times) in [
            (&via_proxy, &proxy_url, &mut proxy_ms),
            (&straight, &direct_url, &mut direct_ms),
        ] {
            let started = Instant::now();
            let body = client
                .get(format!("{base}/small"))
                .send()
                .await?
                .bytes()
                .await?;
            anyhow::ensure!(body.len() == 100, "a short answer");
            if round >= 20 {
                times.push(started.elapsed().as_secs_f64() * 1000.0);
            }
        }
    }
    proxy_ms.sort_by(f64::total_cmp);
    direct_ms.sort_by(f64::total_cmp);

    // 100 MB downloads, three each, taking turns; the best of each.
    let mut proxy_mbps: f64 = 0.0;
    let mut direct_mbps: f64 = 0.0;
    for _ in 0..3 {
        for (client, base, best) in [
            (&via_proxy, &proxy_url, &mut proxy_mbps),
            (&straight, &direct_url, &mut direct_mbps),
        ] {
            let started = Instant::now();
            let mut answer = client.get(format!("{base}/big")).send().await?;
            let mut bytes = 0usize;
            while let Some(chunk) = answer.chunk().await? {
                bytes += chunk.len();
            }
            anyhow::ensure!(bytes == 100_000_000, "a short download");
            *best = best.max(bytes as f64 / 1e6 / started.elapsed().as_secs_f64());
        }
    }

    // The terminal: keystrokes echoed through the proxy.
    let echo_ms = keystrokes(&api, &session, 200).await?;

    // JupyterLab: from asking for it to its first page, through the proxy.
    let started = Instant::now();
    api.call(
        reqwest::Method::POST,
        &format!("/v1/sessions/{session}/apps/jupyter/start"),
        json!({}),
    )
    .await?;
    let opened = api
        .call(
            reqwest::Method::POST,
            &format!("/v1/sessions/{session}/apps/jupyter/open"),
            json!({}),
        )
        .await?;
    let cookie = login(opened["url"].as_str().context("a link")?).await?;
    let page = reqwest::Client::new()
        .get(format!("http://127.0.0.1:{}/lab", opened["port"]))
        .header("cookie", cookie)
        .send()
        .await?;
    anyhow::ensure!(
        page.status().is_success(),
        "JupyterLab's page: {}",
        page.status()
    );
    let text = page.text().await?;
    anyhow::ensure!(text.contains("JupyterLab"), "not JupyterLab's page");
    let jupyter_ms = started.elapsed().as_secs_f64() * 1000.0;

    println!(
        "small request ({requests} each, taking turns): through the proxy p50 {:.3} ms, p99 {:.3} ms; straight to the published port p50 {:.3} ms, p99 {:.3} ms; added p50 {:.3} ms, p99 {:.3} ms",
        percentile(&proxy_ms, 0.5),
        percentile(&proxy_ms, 0.99),
        percentile(&direct_ms, 0.5),
        percentile(&direct_ms, 0.99),
        percentile(&proxy_ms, 0.5) - percentile(&direct_ms, 0.5),
        percentile(&proxy_ms, 0.99) - percentile(&direct_ms, 0.99),
    );
    println!(
        "100 MB download (best of 3 each): through the proxy {proxy_mbps:.0} MB/s; straight {direct_mbps:.0} MB/s; proxy/straight = {:.2}",
        proxy_mbps / direct_mbps
    );
    println!(
        "terminal keystroke echo through the proxy (200 keys): p50 {:.2} ms, p99 {:.2} ms",
        percentile(&echo_ms, 0.5),
        percentile(&echo_ms, 0.99)
    );
    println!(
        "JupyterLab from the start request to its first page through the proxy: {jupyter_ms:.0} ms"
    );

    let _ = api
        .call(
            reqwest::Method::DELETE,
            &format!("/v1/sessions/{session}?force=true"),
            json!(null),
        )
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.cancel();
    // Under load the agent may not have removed the container within those 2 s: the suite
    // was once left an exited session container and its network.
    remove_agent_leftovers(&agent_id).await;
    let js = async_nats::jetstream::new(bus::link::connect_as_url_says(&config.nats_url).await?);
    let _ = js.delete_stream(&config.topology.stream).await;
    let _ = js.delete_stream(&config.agent_bus.telemetry_stream).await;
    let _ = js.delete_stream(&config.agent_bus.commands_stream).await;
    Ok(())
}

/// Follows a circuit's single-use link: the cookie (`name=value`) it sets.
async fn login(link: &str) -> anyhow::Result<String> {
    let answer = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()?
        .get(link)
        .send()
        .await?;
    Ok(answer
        .headers()
        .get("set-cookie")
        .and_then(|c| c.to_str().ok())
        .and_then(|c| c.split(';').next())
        .context("the circuit's cookie")?
        .to_owned())
}

/// Types `count` keys into the session's terminal (ttyd's protocol through the proxy) and
/// times each from its send to the first output after it; the echo times, sorted.
async fn keystrokes(api: &Api, session: &str, count: usize) -> anyhow::Result<Vec<f64>> {
    use futures::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    use tokio_tungstenite::tungstenite::Message;
    api.call(
        reqwest::Method::POST,
        &format!("/v1/sessions/{session}/apps/ttyd/start"),
        json!({}),
    )
    .await?;
    let opened = api
        .call(
            reqwest::Method::POST,
            &format!("/v1/sessions/{session}/apps/ttyd/open"),
            json!({}),
        )
        .await?;
    let cookie = login(opened["url"].as_str().context("a link")?).await?;
    let port = opened["port"].as_u64().context("a port")?;
    let mut request = format!("ws://127.0.0.1:{port}/ws").into_client_request()?;
    request.headers_mut().insert("cookie", cookie.parse()?);
    request
        .headers_mut()
        .insert("sec-websocket-protocol", "tty".parse()?);
    let (mut socket, _) = tokio_tungstenite::connect_async(request).await?;
    let hello = json!({"AuthToken": "", "columns": 120, "rows": 30}).to_string();
    socket.send(Message::text(hello)).await?;
    // Let the shell draw its prompt, then drain what it printed.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    while let Ok(Some(_)) = tokio::time::timeout(Duration::from_millis(200), socket.next()).await {}
    let mut times = Vec::with_capacity(count);
    for i in 0..count {
        // A letter, and every 50 a Ctrl-U to keep the line short.
        let key: &[u8] = if i % 50 == 49 { b"0\x15" } else { b"0x" };
        let started = Instant::now();
        socket.send(Message::binary(key.to_vec())).await?;
        loop {
            let message = tokio::time::timeout(Duration::from_secs(5), socket.next())
                .await
                .context("no echo")?
                .context("the terminal closed")??;
            if message.into_data().first() == Some(&b'0') {
                break;
            }
        }
        times.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    times.sort_by(f64::total_cmp);
    Ok(times)
}
