//! The code map cannot drift: every file path and every Rust item that `docs/ARCHITECTURE.md`
//! names in backticks must exist in the tree.
//!
//! What counts as a name, so the document's prose can keep its other code spans:
//! - a **path**: a span with a `/` that does not start with one (those are HTTP routes),
//!   made of path characters only (no `<`, `*`, `{` or spaces: patterns, not files), read
//!   from the workspace root; a trailing `/` names a directory.
//! - an **item**: `crate::module::Item` (an optional `()` after it), whose first segment is a
//!   workspace library. The modules are followed as files (`a/b.rs` or `a/b/mod.rs`); the
//!   first name left must be defined or re-exported in the file reached, and any name after
//!   it (a variant, a method) must be defined somewhere in the crate.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use regex::Regex;

/// The code spans of a Markdown text outside its fenced blocks.
pub fn code_spans(markdown: &str) -> Vec<String> {
    let span = Regex::new(r"`([^`\n]+)`").unwrap();
    let mut fenced = false;
    let mut spans = Vec::new();
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            spans.extend(span.captures_iter(line).map(|c| c[1].to_owned()));
        }
    }
    spans
}

/// What a code span names, if it names anything this check follows.
#[derive(Debug, PartialEq)]
pub enum Name<'a> {
    Path(&'a str),
    Item(Vec<&'a str>),
}

pub fn name_of(span: &str) -> Option<Name<'_>> {
    let path = Regex::new(r"^[A-Za-z0-9_.\-]+(/[A-Za-z0-9_.\-]+)*/?$").unwrap();
    let item = Regex::new(r"^[a-z_][a-z0-9_]*(::[A-Za-z_][A-Za-z0-9_]*)+(\(\))?$").unwrap();
    if span.contains('/') && path.is_match(span) {
        return Some(Name::Path(span.trim_end_matches('/')));
    }
    if item.is_match(span) {
        return Some(Name::Item(
            span.trim_end_matches("()").split("::").collect(),
        ));
    }
    None
}

/// Where a name is defined (or re-exported) in Rust source.
fn defines(source: &str, name: &str) -> bool {
    let definition = Regex::new(&format!(
        r"\b(fn|struct|enum|trait|type|const|static|mod|macro_rules!)\s+{name}\b"
    ))
    .unwrap();
    let reexport = Regex::new(&format!(
        r"(?s)pub(\([a-z]+\))?\s+use\s[^;]*\b{name}\b[^;]*;"
    ))
    .unwrap();
    // An enum variant or a field: the name at the start of a line, then `,`, `(`, `{` or `:`.
    let member = Regex::new(&format!(r"(?m)^\s*(pub\s+)?{name}\s*[,({{:]")).unwrap();
    definition.is_match(source) || reexport.is_match(source) || member.is_match(source)
}

fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

/// Why `segments` names nothing, or `None` when it resolves. `crates` maps each workspace
/// library's name to its root source file.
fn dangling_item(segments: &[&str], crates: &BTreeMap<String, PathBuf>) -> Option<String> {
    let root = crates.get(segments[0])?;
    let mut file = root.clone();
    let mut dir = root.parent().unwrap().to_path_buf();
    let mut rest = &segments[1..];
    while let Some((first, tail)) = rest.split_first() {
        let as_file = dir.join(format!("{first}.rs"));
        let as_dir = dir.join(first).join("mod.rs");
        if as_file.is_file() {
            file = as_file;
        } else if as_dir.is_file() {
            file = as_dir;
        } else {
            break;
        }
        dir = dir.join(first);
        rest = tail;
    }
    let Some((first, tail)) = rest.split_first() else {
        return None; // a module, and its file exists
    };
    let source = fs::read_to_string(&file).unwrap();
    if !defines(&source, first) {
        return Some(format!("`{first}` is not defined in {}", file.display()));
    }
    let mut crate_files = Vec::new();
    rust_files(root.parent().unwrap(), &mut crate_files);
    let crate_sources: Vec<String> = crate_files
        .iter()
        .map(|f| fs::read_to_string(f).unwrap())
        .collect();
    for name in tail {
        if !crate_sources.iter().any(|s| defines(s, name)) {
            return Some(format!(
                "`{name}` is defined nowhere in crate `{}`",
                segments[0]
            ));
        }
    }
    None
}

/// Every name in `markdown` that does not exist under `root`, with why.
pub fn dangling(markdown: &str, root: &Path, crates: &BTreeMap<String, PathBuf>) -> Vec<String> {
    let mut missing = Vec::new();
    for span in code_spans(markdown) {
        match name_of(&span) {
            Some(Name::Path(path)) if !root.join(path).exists() => {
                missing.push(format!("`{span}`: no such file or directory"));
            }
            Some(Name::Item(segments)) => {
                if let Some(why) = dangling_item(&segments, crates) {
                    missing.push(format!("`{span}`: {why}"));
                }
            }
            _ => {}
        }
    }
    missing
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_told_from_prose() {
        assert_eq!(
            name_of("events/src/store.rs"),
            Some(Name::Path("events/src/store.rs"))
        );
        assert_eq!(name_of("services/"), Some(Name::Path("services")));
        assert_eq!(
            name_of("events::ledger::record()"),
            Some(Name::Item(vec!["events", "ledger", "record"]))
        );
        for prose in [
            "/v1/sessions",
            "<root>.cmd.<agent>",
            "berth up",
            "a/b*",
            "SELECT 1",
        ] {
            assert_eq!(name_of(prose), None, "{prose}");
        }
    }
}
