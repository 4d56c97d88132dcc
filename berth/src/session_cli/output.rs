//! How every read command of `berth session` prints what the API answered (`-o`, as kubectl
//! and nomad users expect): a table for a person (`table`, `wide` with more columns), or the
//! API's own body as JSON or YAML for a program. Colour only on a terminal, and never when
//! NO_COLOR is set (https://no-color.org).

use std::io::IsTerminal;

use comfy_table::{presets, Attribute, Cell, Color, ContentArrangement, Table};
use serde_json::Value;

/// How a read command prints what it got (`-o`, `--output`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// A table (or a summary) for a person.
    #[default]
    #[value(alias = "human")]
    Table,
    /// The table with more columns.
    Wide,
    /// The API's JSON, as it answered.
    Json,
    /// The API's answer as YAML.
    Yaml,
}

impl Output {
    /// Whether a person reads it (a table), not a program (JSON or YAML).
    pub fn is_table(self) -> bool {
        matches!(self, Output::Table | Output::Wide)
    }
}

/// Whether standard output may carry colour: a terminal, and NO_COLOR unset or empty.
pub fn colour() -> bool {
    colour_allowed(
        std::io::stdout().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    )
}

/// The rule behind [`colour`], apart from the process's state.
pub fn colour_allowed(terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty())
}

/// Whether progress bars may be drawn: standard error is a terminal.
pub fn bars() -> bool {
    std::io::stderr().is_terminal()
}

/// `v` as JSON or YAML (`output` one of those), or `None` for a table.
pub fn machine(output: Output, v: &Value) -> Option<String> {
    match output {
        Output::Json => Some(serde_json::to_string_pretty(v).unwrap_or_default() + "\n"),
        Output::Yaml => Some(serde_norway::to_string(v).unwrap_or_default()),
        Output::Table | Output::Wide => None,
    }
}

/// One column of a table: its header, whether only `wide` shows it, and its cell from a row.
pub struct Column {
    pub header: &'static str,
    pub wide: bool,
    pub cell: fn(&Value) -> String,
}

/// A column `table` and `wide` both show.
pub const fn col(header: &'static str, cell: fn(&Value) -> String) -> Column {
    Column {
        header,
        wide: false,
        cell,
    }
}

/// A column only `wide` shows.
pub const fn wide(header: &'static str, cell: fn(&Value) -> String) -> Column {
    Column {
        header,
        wide: true,
        cell,
    }
}

/// `rows` as a table of `columns` (the wide ones when `wide`), headers in bold and statuses
/// in colour when `colour`. No borders, as `kubectl get` prints.
pub fn table(rows: &[Value], columns: &[Column], wide: bool, colour: bool) -> String {
    let shown: Vec<&Column> = columns.iter().filter(|c| wide || !c.wide).collect();
    let mut t = Table::new();
    t.load_preset(presets::NOTHING)
        .set_content_arrangement(ContentArrangement::Disabled);
    if colour {
        t.enforce_styling();
    } else {
        t.force_no_tty();
    }
    t.set_header(shown.iter().map(|c| {
        let cell = Cell::new(c.header);
        if colour {
            cell.add_attribute(Attribute::Bold)
        } else {
            cell
        }
    }));
    for row in rows {
        t.add_row(shown.iter().map(|c| {
            let text = (c.cell)(row);
            let tint = if colour && c.header == "STATUS" {
                status_colour(&text)
            } else {
                None
            };
            match tint {
                Some(tint) => Cell::new(text).fg(tint),
                None => Cell::new(text),
            }
        }));
    }
    // comfy-table pads the first column with a space on the left: kubectl does not.
    t.to_string()
        .lines()
        .map(|l| l.strip_prefix(' ').unwrap_or(l).trim_end().to_owned() + "\n")
        .collect()
}

/// A session status's colour: green running, yellow on its way, red failed.
fn status_colour(status: &str) -> Option<Color> {
    let word = status.split_whitespace().next().unwrap_or_default();
    match word {
        "RUNNING" => Some(Color::Green),
        "ERROR" | "CANCELLED" => Some(Color::Red),
        "TERMINATED" => Some(Color::DarkGrey),
        "PENDING" | "SCHEDULED" | "PREPARING" | "PULLING" | "PREPARED" | "CREATING"
        | "RESTARTING" | "TERMINATING" => Some(Color::Yellow),
        _ => None,
    }
}

/// The text of `v` at JSON pointer `at`: a string as it is, `-` for null or absent, anything
/// else as JSON.
pub fn text(v: &Value, at: &str) -> String {
    match v.pointer(at) {
        None | Some(Value::Null) => "-".into(),
        Some(Value::String(s)) if s.is_empty() => "-".into(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// An amount of bytes as a person reads it (binary units).
pub fn bytes(n: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut n = n;
    let mut unit = 0;
    while n.abs() >= 1024.0 && unit < UNITS.len() - 1 {
        n /= 1024.0;
        unit += 1;
    }
    if unit == 0 || n.fract() == 0.0 {
        format!("{n:.0} {}", UNITS[unit])
    } else {
        format!("{n:.1} {}", UNITS[unit])
    }
}

/// The bytes at `at` (a number), or `-`.
pub fn bytes_at(v: &Value, at: &str) -> String {
    v.pointer(at)
        .and_then(Value::as_f64)
        .map(bytes)
        .unwrap_or_else(|| "-".into())
}

/// Amounts (`{cpu, memory_bytes, gpu}`) at `at`, in one cell.
pub fn amounts(v: &Value, at: &str) -> String {
    match v.pointer(at) {
        Some(a) if a.is_object() => format!(
            "{} cpu, {}, {} gpu",
            text(a, "/cpu"),
            bytes_at(a, "/memory_bytes"),
            text(a, "/gpu")
        ),
        _ => "-".into(),
    }
}

/// A list of strings at `at`, joined with commas.
pub fn joined(v: &Value, at: &str) -> String {
    let items: Vec<String> = v
        .pointer(at)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|i| match i {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect();
    if items.is_empty() {
        "-".into()
    } else {
        items.join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const COLUMNS: [Column; 3] = [
        col("NAME", |v| text(v, "/name")),
        col("STATUS", |v| text(v, "/status")),
        wide("IMAGE", |v| text(v, "/image")),
    ];

    #[test]
    fn a_table_has_its_columns_and_wide_adds_its_own() {
        let rows = [
            json!({"name": "alpha", "status": "RUNNING", "image": "berth/shell"}),
            json!({"name": "b", "status": null, "image": "berth/python"}),
        ];
        let narrow = table(&rows, &COLUMNS, false, false);
        let lines: Vec<&str> = narrow.lines().collect();
        assert_eq!(
            lines[0].split_whitespace().collect::<Vec<_>>(),
            ["NAME", "STATUS"]
        );
        assert_eq!(
            lines[1].split_whitespace().collect::<Vec<_>>(),
            ["alpha", "RUNNING"]
        );
        assert_eq!(lines[2].split_whitespace().collect::<Vec<_>>(), ["b", "-"]);
        assert!(!narrow.contains("berth/shell"), "{narrow}");
        assert!(
            !narrow.contains('\u{1b}'),
            "no colour asked for: {narrow:?}"
        );
        let wide = table(&rows, &COLUMNS, true, false);
        assert!(wide.lines().next().unwrap().ends_with("IMAGE"), "{wide}");
        assert!(wide.contains("berth/python"), "{wide}");
        // Columns line up: each value starts where its header does.
        let at = wide.lines().next().unwrap().find("IMAGE").unwrap();
        assert_eq!(wide.lines().nth(1).unwrap().find("berth/shell"), Some(at));
    }

    #[test]
    fn colour_only_on_a_terminal_and_never_with_no_color() {
        use std::ffi::OsStr;
        assert!(colour_allowed(true, None));
        assert!(colour_allowed(true, Some(OsStr::new(""))), "empty: unset");
        assert!(!colour_allowed(true, Some(OsStr::new("1"))));
        assert!(!colour_allowed(false, None));
        let rows = [json!({"name": "alpha", "status": "RUNNING"})];
        assert!(table(&rows, &COLUMNS, false, true).contains('\u{1b}'));
    }

    #[test]
    fn machine_formats_carry_the_body_as_it_is() {
        let v = json!({"sessions": [{"name": "alpha", "cpu": 1.5}], "total": 1});
        let json = machine(Output::Json, &v).unwrap();
        assert_eq!(serde_json::from_str::<Value>(&json).unwrap(), v);
        let yaml = machine(Output::Yaml, &v).unwrap();
        assert_eq!(serde_norway::from_str::<Value>(&yaml).unwrap(), v);
        assert!(machine(Output::Table, &v).is_none());
    }

    #[test]
    fn cells_read_as_a_person_reads_them() {
        let v = json!({"a": {"cpu": 1.5, "memory_bytes": 1610612736, "gpu": 0.0},
                       "tags": ["x", "y"], "n": 3, "s": ""});
        assert_eq!(amounts(&v, "/a"), "1.5 cpu, 1.5 GiB, 0.0 gpu");
        assert_eq!(joined(&v, "/tags"), "x,y");
        assert_eq!(text(&v, "/n"), "3");
        assert_eq!(text(&v, "/s"), "-");
        assert_eq!(text(&v, "/absent"), "-");
        assert_eq!(bytes(512.0), "512 B");
        assert_eq!(bytes(268435456.0), "256 MiB");
    }
}
