//! A headless Chromium driven over WebDriver (Debian's `chromium` and `chromium-driver`,
//! which `infra/test.sh` installs), for the tests of berth's pages. Without chromedriver a
//! browser test says so and passes nothing off as checked.

use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common::free_port;

/// One chromedriver and the browser session it drives; both end with it, also when the test
/// fails.
pub struct Browser {
    pub client: fantoccini::Client,
    driver: Child,
}

impl Drop for Browser {
    /// chromedriver starts Chromium as processes of its own, which outlive a chromedriver that
    /// is killed alone (a run once left five headless browsers behind): the driver leads a
    /// process group of its own, and the whole group is killed.
    fn drop(&mut self) {
        kill_process_group(&self.driver);
        let _ = self.driver.wait();
    }
}

fn kill_process_group(leader: &Child) {
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{}", leader.id())])
        .stderr(Stdio::null())
        .status();
}

/// A headless Chromium, or `None` where chromedriver is not installed (a failure under CI:
/// `berth_tests::missing_prerequisite`).
pub async fn browser() -> Option<Browser> {
    if Command::new("chromedriver")
        .arg("--version")
        .output()
        .is_err()
    {
        berth_tests::missing_prerequisite(
            "chromedriver is not installed (infra/test.sh installs chromium and chromium-driver)",
        );
        return None;
    }
    let port = free_port();
    let mut driver = Command::new("chromedriver")
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("chromedriver starts");
    let url = format!("http://127.0.0.1:{port}");
    let capabilities = serde_json::json!({
        "goog:chromeOptions": {
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                     "--disable-dev-shm-usage", "--window-size=1000,700"]
        }
    });
    let serde_json::Value::Object(capabilities) = capabilities else {
        unreachable!("an object")
    };
    let mut last = None;
    for _ in 0..100 {
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        match fantoccini::ClientBuilder::new(connector)
            .capabilities(capabilities.clone())
            .connect(&url)
            .await
        {
            Ok(client) => return Some(Browser { client, driver }),
            Err(e) => last = Some(e.to_string()),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    kill_process_group(&driver);
    let _ = driver.wait();
    panic!("chromedriver never opened a browser: {last:?}");
}

impl Browser {
    /// The page's visible text once it contains `wanted`, within 30 s.
    pub async fn wait_for_text(&self, wanted: &str) -> String {
        let mut text = String::new();
        for _ in 0..300 {
            let seen = self
                .client
                .execute("return document.body.innerText", vec![])
                .await
                .expect("the page runs a script");
            text = seen.as_str().unwrap_or_default().to_owned();
            if text.contains(wanted) {
                return text;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("`{wanted}` never showed; the page reads: {text}");
    }
}

/// Where a failed step's screenshot is kept: `target/console-screenshots/`.
fn failure_dir() -> std::path::PathBuf {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    target.join("console-screenshots")
}

impl Browser {
    /// Runs one step of a browser test; when it fails, a screenshot of the page as it was is
    /// kept (`target/console-screenshots/<test>-<step>.png`) before the failure goes on.
    pub async fn step<T>(
        &self,
        test: &str,
        name: &str,
        work: impl std::future::Future<Output = T>,
    ) -> T {
        use futures::FutureExt;
        match std::panic::AssertUnwindSafe(work).catch_unwind().await {
            Ok(value) => value,
            Err(panic) => {
                let dir = failure_dir();
                let _ = std::fs::create_dir_all(&dir);
                let file = dir.join(format!("{test}-{}.png", name.replace(' ', "-")));
                match self.client.screenshot().await {
                    Ok(png) => {
                        let _ = std::fs::write(&file, png);
                        eprintln!("the failed step's screenshot: {}", file.display());
                    }
                    Err(e) => eprintln!("no screenshot of the failed step: {e}"),
                }
                std::panic::resume_unwind(panic)
            }
        }
    }

    /// A screenshot of the page for the README's pictures: kept in
    /// `target/console-pictures/<name>.png`, or in the directory `BERTH_CONSOLE_PICTURES`
    /// names (`BERTH_CONSOLE_PICTURES=docs/console` refreshes the README's), so that a test run
    /// leaves the checkout as it found it. Each carries the fingerprint of the console it was
    /// taken of ([`console_fingerprint`]), which `the_readmes_pictures_are_of_this_console`
    /// holds the README's pictures to.
    pub async fn document(&self, name: &str) {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let dir = match std::env::var_os("BERTH_CONSOLE_PICTURES") {
            Some(dir) => root.join(dir),
            None => failure_dir().with_file_name("console-pictures"),
        };
        std::fs::create_dir_all(&dir).unwrap();
        let png = self.client.screenshot().await.expect("a screenshot");
        let png = with_text(&png, FINGERPRINT_KEY, &console_fingerprint());
        std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
    }

    /// The element `css` finds, waiting for it up to 30 s.
    pub async fn find(&self, css: &str) -> fantoccini::elements::Element {
        self.client
            .wait()
            .at_most(Duration::from_secs(30))
            .for_element(fantoccini::Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("`{css}` never showed: {e}"))
    }

    /// Clicks what `css` finds. An element the page drew again between the find and the
    /// click (a stale reference) is found again.
    pub async fn click(&self, css: &str) {
        let mut tries = 0;
        loop {
            match self.find(css).await.click().await {
                Ok(_) => return,
                Err(e) if tries < 5 && e.to_string().contains("stale element") => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("`{css}`: {e}"),
            }
        }
    }

    /// Types `text` into the field `css` finds, replacing what it held.
    pub async fn fill(&self, css: &str, text: &str) {
        let field = self.find(css).await;
        field.clear().await.unwrap();
        field.send_keys(text).await.unwrap();
    }

    /// The text of what `css` finds, read afresh from the page (a live page may swap the
    /// element out between a find and a read), waiting for it up to 30 s.
    pub async fn text_of(&self, css: &str) -> String {
        self.find(css).await;
        let script = "const e = document.querySelector(arguments[0]); return e && e.innerText";
        for _ in 0..300 {
            let text = self
                .client
                .execute(script, vec![serde_json::json!(css)])
                .await
                .unwrap_or_else(|e| panic!("the page reads `{css}`: {e}"));
            if let Some(text) = text.as_str() {
                return text.to_owned();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("`{css}` went away and never came back");
    }

    /// Runs `script` in the page and returns its value.
    pub async fn eval(&self, script: &str) -> serde_json::Value {
        self.client
            .execute(script, vec![])
            .await
            .unwrap_or_else(|e| panic!("the page runs `{script}`: {e}"))
    }

    /// The page's form controls that no label names (none, on an accessible page).
    pub async fn unlabelled_controls(&self) -> Vec<String> {
        let found = self
            .eval(
                "return [...document.querySelectorAll('input, select, textarea')]\
                 .filter(e => e.type !== 'hidden')\
                 .filter(e => e.labels.length === 0 && !e.getAttribute('aria-label') \
                              && !e.getAttribute('aria-labelledby'))\
                 .map(e => e.outerHTML)",
            )
            .await;
        serde_json::from_value(found).unwrap()
    }

    /// Presses Tab until the element with `id` has the focus (at most 80 times): a user on
    /// a keyboard reaching it.
    pub async fn tab_to(&self, id: &str) {
        let tab = char::from(fantoccini::key::Key::Tab).to_string();
        for _ in 0..80 {
            let focused = self
                .eval("return document.activeElement && document.activeElement.id")
                .await;
            if focused == serde_json::json!(id) {
                return;
            }
            self.client
                .active_element()
                .await
                .unwrap()
                .send_keys(&tab)
                .await
                .unwrap();
        }
        panic!("Tab never reached #{id}");
    }

    /// Presses a key on the element that has the focus.
    pub async fn press(&self, keys: &str) {
        self.client
            .active_element()
            .await
            .unwrap()
            .send_keys(keys)
            .await
            .unwrap();
    }
}

/// The key of the PNG text chunk a picture's console fingerprint is kept under.
pub const FINGERPRINT_KEY: &str = "berth-console";

/// A digest of everything that draws the console: its templates, styles and scripts, and the
/// code that renders them (`gateway/templates`, `gateway/assets` but the vendored libraries,
/// `gateway/src/console`). A picture carrying another was taken of another console.
pub fn console_fingerprint() -> String {
    use sha2::{Digest, Sha256};
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for dir in ["gateway/templates", "gateway/assets", "gateway/src/console"] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap() {
            let path = entry.unwrap().path();
            if path.is_file() {
                files.push(path);
            }
        }
    }
    files.sort();
    let mut digest = Sha256::new();
    for file in files {
        let relative = file
            .strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        digest.update(relative.as_bytes());
        digest.update(std::fs::read(&file).unwrap());
    }
    hex::encode(&digest.finalize()[..16])
}

/// `png` with a text chunk `key` = `text` right after its header chunk.
pub fn with_text(png: &[u8], key: &str, text: &str) -> Vec<u8> {
    // The signature (8 bytes), then IHDR: length (4), type (4), 13 bytes, CRC (4).
    let after_header = 8 + 4 + 4 + 13 + 4;
    let mut data = key.as_bytes().to_vec();
    data.push(0);
    data.extend_from_slice(text.as_bytes());
    let mut chunk = (data.len() as u32).to_be_bytes().to_vec();
    let mut typed = b"tEXt".to_vec();
    typed.extend_from_slice(&data);
    chunk.extend_from_slice(&typed);
    chunk.extend_from_slice(&crc32fast::hash(&typed).to_be_bytes());
    let mut out = png[..after_header].to_vec();
    out.extend_from_slice(&chunk);
    out.extend_from_slice(&png[after_header..]);
    out
}

/// The text chunks of `png`, by key.
pub fn texts(png: &[u8]) -> std::collections::BTreeMap<String, String> {
    let mut found = std::collections::BTreeMap::new();
    let mut at = 8;
    while at + 8 <= png.len() {
        let length = u32::from_be_bytes(png[at..at + 4].try_into().unwrap()) as usize;
        let kind = &png[at + 4..at + 8];
        let Some(data) = png.get(at + 8..at + 8 + length) else {
            break;
        };
        if kind == b"tEXt" {
            if let Some(zero) = data.iter().position(|b| *b == 0) {
                found.insert(
                    String::from_utf8_lossy(&data[..zero]).into_owned(),
                    String::from_utf8_lossy(&data[zero + 1..]).into_owned(),
                );
            }
        }
        at += 12 + length;
    }
    found
}

/// The README's console pictures (`docs/console/`) are of this console: each carries this
/// console's fingerprint (`BERTH_CONSOLE_PICTURES=docs/console infra/test.sh` takes them
/// again, and leaves this check to the next run), every picture the browser tests take is
/// among them, and the README links each.
#[test]
fn the_readmes_pictures_are_of_this_console() {
    if std::env::var_os("BERTH_CONSOLE_PICTURES").is_some() {
        // This run takes them, beside this test: the next one holds them to the console.
        eprintln!("the pictures are being taken again: not checked in this run");
        return;
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let fingerprint = console_fingerprint();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let tests = std::fs::read_to_string(root.join("tests/e2e/console.rs")).unwrap();
    let taken: std::collections::BTreeSet<String> = tests
        .split("b.document(\"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .map(str::to_owned)
        .collect();
    assert!(!taken.is_empty(), "the browser tests take pictures");
    let mut stale = Vec::new();
    for name in &taken {
        let file = format!("docs/console/{name}.png");
        let png = std::fs::read(root.join(&file)).unwrap_or_else(|_| {
            panic!("{file} is missing: BERTH_CONSOLE_PICTURES=docs/console infra/test.sh takes it")
        });
        if texts(&png).get(FINGERPRINT_KEY) != Some(&fingerprint) {
            stale.push(file.clone());
        }
        assert!(readme.contains(&file), "the README does not link {file}");
    }
    assert!(
        stale.is_empty(),
        "pictures of another console (take them again with \
         BERTH_CONSOLE_PICTURES=docs/console infra/test.sh): {stale:?}"
    );
}

#[test]
fn a_text_chunk_is_read_back_from_the_png_it_was_put_in() {
    // The smallest PNG: a 1x1 grey pixel.
    let png = hex::decode(
        "89504e470d0a1a0a0000000d4948445200000001000000010800000000\
         3a7e9b550000000a49444154789c6360000000020001e221bc330000000049454e44ae426082",
    )
    .unwrap();
    let marked = with_text(&png, FINGERPRINT_KEY, "abc123");
    assert_eq!(
        texts(&marked).get(FINGERPRINT_KEY).map(String::as_str),
        Some("abc123")
    );
    assert!(
        marked.ends_with(&png[png.len() - 12..]),
        "the end chunk stays last"
    );
}
