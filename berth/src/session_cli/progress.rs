//! The bars `berth session wait` and `commit --follow` draw (indicatif) while a session makes
//! its way or a commit runs: on standard error, and only when it is a terminal; elsewhere
//! a wait prints nothing and a commit's steps print as lines.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::Value;

/// A spinner on a terminal, or nothing.
pub struct Bar(Option<ProgressBar>);

impl Bar {
    /// A spinner when standard error is a terminal.
    pub fn new() -> Bar {
        if !super::output::bars() {
            return Bar(None);
        }
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        bar.set_style(
            ProgressStyle::with_template("{spinner} {elapsed:>4} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        bar.enable_steady_tick(std::time::Duration::from_millis(120));
        Bar(Some(bar))
    }

    /// Shows where session `detail` (the API's detail) is.
    pub fn session(&self, detail: &Value) {
        if let Some(bar) = &self.0 {
            bar.set_message(session_line(detail));
        }
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
