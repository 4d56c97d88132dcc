//! `berth bench console`: the Sessions page over many sessions, next to the JSON list of the
//! same sessions, measured in the same run: bytes and the gateway's answer time for each
//! (an HTTP client), then in headless Chromium the page's time to first contentful paint
//! next to the time to fetch and parse the JSON list from the same page. Chromium is driven
//! over WebDriver (Debian's `chromium-driver`) with plain HTTP requests. The Data page (over
//! `--folders` folders) and the administration pages (users over `--users` users, presets)
//! are measured the same way, each next to the JSON list it draws.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use events::payloads::Role;
use serde_json::{json, Value};

use crate::sessions::percentile;

/// Sessions on the page (one page of the list, out of all of them).
const PAGE_ROWS: usize = 20;

pub async fn console(
    url: &str,
    sessions: usize,
    users: usize,
    folders: usize,
    rounds: usize,
) -> anyhow::Result<()> {
    let pool = events::store::pool(url, 16)?;
    berth::app::migrate(&pool).await?;
    crate::sessions::fill(&pool, 10, sessions).await?;
    let run = uuid::Uuid::now_v7().simple().to_string();
    for n in 0..users {
        launcher::access::create_user(
            &pool,
            &format!("user{n}-{}@bench.berth", &run[24..]),
            Role::User,
            "default",
            &[],
        )
        .await?;
    }
    let view = gateway::projection::SessionsView;
    events::projection::install(&pool, &view).await?;
    events::projection::catch_up(&pool, &view).await?;
    let (_, key) = launcher::access::create_user(
        &pool,
        "console@berth.local",
        Role::Superadmin,
        "default",
        &[],
    )
    .await?;
    let owner = {
        let client = pool.get().await?;
        events::ledger::key_owner(&client, &key)
            .await?
            .context("the bench's superadmin")?
    };
    for n in 0..folders {
        launcher::launch::create_folder(
            &pool,
            &owner,
            &format!("bench{n}"),
            events::volumes::HOST_LOCAL,
            Default::default(),
        )
        .await
        .map_err(|e| anyhow::anyhow!("folder bench{n}: {e:?}"))?;
    }
    let stop = tokio_util::sync::CancellationToken::new();
    let state = gateway::AppState::new(pool.clone(), None, events::relay::Topology::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    tokio::spawn(gateway::run::serve(listener.into(), state, stop.clone()));

    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()?;
    let signed_in = http
        .post(format!("{base}/console/sign-in"))
        .header("origin", &base)
        .header("content-type", "application/x-www-form-urlencoded")
        // An API key is letters, digits, `_` and `-`: nothing to escape in a form.
        .body(format!("key={key}"))
        .send()
        .await?;
    let cookie = signed_in
        .headers()
        .get("set-cookie")
        .and_then(|c| c.to_str().ok())
        .and_then(|c| c.split(';').next())
        .context("the sign-in set no cookie")?
        .to_owned();
    let page_url = format!("{base}/console/sessions?tab=running");
    let json_url = format!("{base}/v1/sessions?state=running&limit={PAGE_ROWS}");
    println!(
        "berth bench console: {sessions} sessions, a page of {PAGE_ROWS} rows, {rounds} rounds"
    );
    let mut page = Timed::default();
    let mut list = Timed::default();
    for _ in 0..rounds {
        page.take(http.get(&page_url).header("cookie", &cookie))
            .await?;
        list.take(http.get(&json_url).header("x-api-key", &key))
            .await?;
    }
    page.report("Sessions page (HTML), server", &list, "JSON list, server");
    // The Data page and the administration pages, each next to the JSON list it draws.
    for (name, page_path, json_path) in [
        ("Data page", "/console/data", "/v1/folders"),
        ("Admin: users", "/console/admin/users", "/v1/admin/users"),
        ("Admin: presets", "/console/admin/presets", "/v1/presets"),
        ("Admin: images", "/console/admin/images", "/v1/admin/images"),
    ] {
        let mut page = Timed::default();
        let mut list = Timed::default();
        for _ in 0..rounds {
            page.take(
                http.get(format!("{base}{page_path}"))
                    .header("cookie", &cookie),
            )
            .await?;
            list.take(
                http.get(format!("{base}{json_path}"))
                    .header("x-api-key", &key),
            )
            .await?;
        }
        page.report(&format!("{name} (HTML), server"), &list, "its JSON, server");
    }

    match chromium(&base, &key, rounds).await {
        Ok((paint, fetch)) => {
            let (paint, fetch) = (sorted(paint), sorted(fetch));
            println!(
                "  Chromium: page first contentful paint p50 {:.1} ms p95 {:.1} ms; \
                 JSON list fetched and parsed from the page p50 {:.1} ms p95 {:.1} ms",
                percentile(&paint, 0.5),
                percentile(&paint, 0.95),
                percentile(&fetch, 0.5),
                percentile(&fetch, 0.95)
            );
        }
        Err(e) => println!("  Chromium: not measured ({e:#})"),
    }
    stop.cancel();
    Ok(())
}

/// Bytes and answer times of one kind of request.
#[derive(Default)]
struct Timed {
    bytes: usize,
    millis: Vec<f64>,
}

impl Timed {
    async fn take(&mut self, request: reqwest::RequestBuilder) -> anyhow::Result<()> {
        let started = Instant::now();
        let answer = request.send().await?.error_for_status()?;
        let body = answer.bytes().await?;
        self.millis.push(started.elapsed().as_secs_f64() * 1000.0);
        self.bytes = body.len();
        Ok(())
    }

    fn report(&self, name: &str, baseline: &Timed, baseline_name: &str) {
        let (mine, theirs) = (sorted(self.millis.clone()), sorted(baseline.millis.clone()));
        println!(
            "  {name}: {} bytes, p50 {:.2} ms p95 {:.2} ms | {baseline_name}: {} bytes, p50 {:.2} ms p95 {:.2} ms",
            self.bytes,
            percentile(&mine, 0.5),
            percentile(&mine, 0.95),
            baseline.bytes,
            percentile(&theirs, 0.5),
            percentile(&theirs, 0.95),
        );
    }
}

fn sorted(mut values: Vec<f64>) -> Vec<f64> {
    values.sort_by(f64::total_cmp);
    values
}

/// A chromedriver of the bench's own; it ends with it.
struct Driver(Child);

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// In headless Chromium, `rounds` loads of the page (first contentful paint, from the
/// navigation's start) and `rounds` fetches of the JSON list from it (to parsed JSON).
async fn chromium(base: &str, key: &str, rounds: usize) -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let _driver = Driver(
        Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("chromedriver (Debian's chromium-driver) is not installed")?,
    );
    let webdriver = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    let capabilities = json!({"capabilities": {"alwaysMatch": {"goog:chromeOptions": {"args": [
        "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
        "--window-size=1280,900"]}}}});
    let mut session = None;
    for _ in 0..100 {
        if let Ok(answer) = http
            .post(format!("{webdriver}/session"))
            .json(&capabilities)
            .send()
            .await
        {
            let body: Value = answer.json().await?;
            session = body["value"]["sessionId"].as_str().map(str::to_owned);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let session = session.context("chromedriver opened no browser")?;
    let at = format!("{webdriver}/session/{session}");
    let go = |url: String| {
        let (http, at) = (http.clone(), at.clone());
        async move {
            http.post(format!("{at}/url"))
                .json(&json!({ "url": url }))
                .send()
                .await?
                .error_for_status()?;
            anyhow::Ok(())
        }
    };
    let run = |script: &'static str, args: Value| {
        let (http, at) = (http.clone(), at.clone());
        async move {
            let answer: Value = http
                .post(format!("{at}/execute/sync"))
                .json(&json!({ "script": script, "args": args }))
                .send()
                .await?
                .json()
                .await?;
            anyhow::Ok(answer["value"].clone())
        }
    };
    go(format!("{base}/console/sign-in")).await?;
    run(
        "document.getElementById('key').value = arguments[0]; \
         document.getElementById('sign-in').click();",
        json!([key]),
    )
    .await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (mut paint, mut fetch) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        go(format!("{base}/console/sessions?tab=running")).await?;
        let fcp = run(
            "return new Promise(done => { const since = performance.now(); \
               (function look() { \
                 const p = performance.getEntriesByName('first-contentful-paint')[0]; \
                 if (p) done(p.startTime); \
                 else if (performance.now() - since > 5000) done(null); \
                 else setTimeout(look, 20); })(); });",
            json!([]),
        )
        .await?;
        paint.push(fcp.as_f64().context("the page reported no first paint")?);
        let took = run(
            "const started = performance.now(); \
             return fetch('/v1/sessions?state=running&limit=' + arguments[0]) \
               .then(r => r.json()).then(() => performance.now() - started);",
            json!([PAGE_ROWS]),
        )
        .await?;
        fetch.push(took.as_f64().context("the JSON list was not fetched")?);
    }
    let _ = http.delete(&at).send().await;
    Ok((paint, fetch))
}
