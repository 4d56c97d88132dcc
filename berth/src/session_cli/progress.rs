//! The bars `berth session wait` and `commit --follow` draw (indicatif) while a session makes
//! its way or a commit runs: a spinner with the session's status, a bar of bytes while its
//! image is pulled (from its agent's `SessionPullProgressed` events); on standard error, and
//! only when it is a terminal. Elsewhere a wait prints nothing and a commit's steps print as
//! lines.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::Value;

/// A spinner on a terminal, or nothing.
#[derive(Clone)]
pub struct Bar(Option<ProgressBar>);

fn spinner() -> ProgressStyle {
    ProgressStyle::with_template("{spinner} {elapsed:>4} {msg}")
        .unwrap_or_else(|_| ProgressStyle::default_spinner())
}

impl Bar {
    /// A spinner when standard error is a terminal.
    pub fn new() -> Bar {
        if !super::output::bars() {
            return Bar(None);
        }
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        bar.set_style(spinner());
        bar.enable_steady_tick(std::time::Duration::from_millis(120));
        Bar(Some(bar))
    }

    /// Whether a bar is drawn at all.
    pub fn drawn(&self) -> bool {
        self.0.is_some()
    }

    /// Shows where session `detail` (the API's detail) is: past PULLING, a spinner again.
    pub fn session(&self, detail: &Value) {
        if let Some(bar) = &self.0 {
            if detail["status"] != "PULLING" && bar.length().is_some() {
                bar.unset_length();
                bar.set_style(spinner());
            }
            if bar.length().is_none() {
                bar.set_message(session_line(detail));
            }
        }
    }

    /// Shows a pull's progress (a `SessionPullProgressed` payload) as a bar of bytes.
    pub fn pull(&self, payload: &Value) {
        let Some(bar) = &self.0 else {
            return;
        };
        let total = payload["total_bytes"].as_u64().unwrap_or_default();
        if total == 0 {
            return;
        }
        if bar.length().is_none() {
            bar.set_style(
                ProgressStyle::with_template(
                    "{spinner} {elapsed:>4} {msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
            );
        }
        bar.set_length(total);
        bar.set_position(payload["current_bytes"].as_u64().unwrap_or_default());
        bar.set_message(format!(
            "PULLING {} ({}/{} layers)",
            payload["image"].as_str().unwrap_or_default(),
            payload["layers_done"],
            payload["layers"]
        ));
    }

    /// Shows a commit's step (a `SessionCommitProgressed` payload), or prints it as a line
    /// when no bar is drawn.
    pub fn step(&self, payload: &Value) {
        let line = format!(
            "{}  {}",
            payload["step"].as_str().unwrap_or_default(),
            payload["detail"].as_str().unwrap_or_default()
        );
        match &self.0 {
            Some(bar) => {
                bar.println(&line);
                bar.set_message(line);
            }
            None => println!("{line}"),
        }
    }

    /// Takes the bar off the terminal.
    pub fn clear(&self) {
        if let Some(bar) = &self.0 {
            bar.finish_and_clear();
        }
    }
}

/// A session's status as a spinner's message: `PULLING berth/python:latest`, or the status
/// and its reason.
fn session_line(detail: &Value) -> String {
    let status = detail["status"].as_str().unwrap_or("-");
    match (status, detail["status_reason"].as_str()) {
        ("PULLING", _) => format!("PULLING {}", detail["image"].as_str().unwrap_or_default()),
        (status, Some(reason)) => format!("{status} ({reason})"),
        (status, None) => status.to_owned(),
    }
}
