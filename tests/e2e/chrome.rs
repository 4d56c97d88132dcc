//! A headless Chromium driven over WebDriver (Debian's `chromium` and `chromium-driver`,
//! which `infra/test.sh` installs), for the tests of berth's pages. Without chromedriver a
//! browser test says so and passes nothing off as checked.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common::free_port;

/// One chromedriver and the browser session it drives; both end with it.
pub struct Browser {
    pub client: fantoccini::Client,
    driver: Child,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
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
    let _ = driver.kill();
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
