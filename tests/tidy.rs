//! Tidy: the architecture rules of docs/ARCHITECTURE.md, checked on the source tree, so they
//! hold by test rather than by prose.
//!
//! - SQL lives at the edges: a statement or a PostgreSQL call appears only in a crate's
//!   database module (`db.rs` or `db/`), in a projection module, or in the backbone modules
//!   of `events` (store, ledger, relay, audit, consumer, projection, pg).
//! - A service never depends on another service; the gateway embeds the launcher and no
//!   other service.
//! - The domain crate depends on serde, serde_json, chrono, uuid and thiserror only (and,
//!   behind its `openapi` feature, utoipa), and nothing that does I/O reaches it transitively,
//!   with every feature the workspace turns on.
//! - The backbone's migrations make only the tables of the log and its readers and the
//!   ledger's; a service's own tables are its schema, migrated by its crate.
//! - The code map names only what exists: every path and item that `docs/ARCHITECTURE.md`
//!   names is in the tree ([`code_map`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use regex::Regex;
use serde_json::Value;

mod code_map;

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Every `.rs` file under a `src/` directory of the workspace (production code).
fn source_files(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            if !name.starts_with('.') && name != "target" && name != "infra" {
                source_files(&path, found);
            }
        } else if name.ends_with(".rs") && path.components().any(|c| c.as_os_str() == "src") {
            found.push(path);
        }
    }
}

/// Where SQL may be written, relative to the workspace root.
fn sql_allowed(relative: &str) -> bool {
    const BACKBONE: &[&str] = &[
        "events/src/store.rs",
        "events/src/audit.rs",
        "events/src/relay.rs",
        "events/src/consumer.rs",
        "events/src/pg.rs",
        "events/src/sql.rs",
    ];
    let file = relative.rsplit('/').next().unwrap();
    BACKBONE.contains(&relative)
        || relative.starts_with("events/src/ledger/")
        || file == "db.rs"
        || relative.contains("/db/")
        || file == "projection.rs"
        || relative.contains("/projection/")
}

/// The places in `text` that talk SQL: a PostgreSQL client call, or a string literal that
/// starts with a statement keyword.
fn sql_sites(text: &str) -> Vec<(usize, String)> {
    let call = Regex::new(
        r"\.(query_one|query_opt|query_raw|query_typed|batch_execute|simple_query|prepare_cached|prepare_typed|copy_in|copy_out)\(|\.(prepare|execute)\(\s*(&|\x22|r#)",
    )
    .unwrap();
    let statement = Regex::new(
        r#"(r#*)?"\s*(SELECT|INSERT INTO|UPDATE|DELETE FROM|WITH|CREATE|ALTER|DROP|TRUNCATE|LOCK TABLE|COPY|GRANT|REVOKE)\b"#,
    )
    .unwrap();
    let line_of = |offset: usize| text[..offset].matches('\n').count() + 1;
    let mut sites: Vec<(usize, String)> = call
        .find_iter(text)
        .chain(statement.find_iter(text))
        .map(|m| (line_of(m.start()), m.as_str().trim().to_owned()))
        .collect();
    sites.sort();
    sites.dedup_by_key(|(line, _)| *line);
    sites
}

#[test]
fn sql_is_written_only_in_database_and_projection_modules() {
    let root = workspace_root();
    let mut files = Vec::new();
    source_files(&root, &mut files);
    assert!(
        files.len() > 40,
        "the walk found only {} files",
        files.len()
    );
    let mut offences = Vec::new();
    for path in files {
        let relative = path
            .strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        if sql_allowed(&relative) {
            continue;
        }
        for (line, site) in sql_sites(&fs::read_to_string(&path).unwrap()) {
            offences.push(format!("{relative}:{line}: {site}"));
        }
    }
    assert!(
        offences.is_empty(),
        "SQL outside a db or projection module (move it into the crate's db.rs):\n{}",
        offences.join("\n")
    );
}

#[test]
fn the_sql_finder_sees_a_query_in_a_handler_and_not_an_http_query_string() {
    let handler = "async fn h(c: &Client) { c.query(\"SELECT 1\", &[]).await; }";
    assert_eq!(sql_sites(handler).len(), 1);
    let prepared = "let s = client.prepare_cached(&sql).await?;";
    assert_eq!(sql_sites(prepared).len(), 1);
    let raw = "client.batch_execute(r#\"\n  CREATE TABLE x ()\"#)";
    assert_eq!(sql_sites(raw).len(), 1);
    let http = "http.get(url).query(&[(\"limit\", \"500\")]).send()";
    assert!(sql_sites(http).is_empty());
    let prose = "\"Update your key\"";
    assert!(sql_sites(prose).is_empty());
}

/// `cargo metadata` for the whole workspace, with its resolved dependency graph.
fn metadata() -> Value {
    // Only this host's platform: the graph of another one would need crates never downloaded.
    let rustc = Command::new("rustc")
        .arg("-vV")
        .output()
        .expect("rustc runs");
    let host = String::from_utf8(rustc.stdout)
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_owned))
        .expect("rustc -vV names the host");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--filter-platform",
            &host,
        ])
        .current_dir(workspace_root())
        .output()
        .expect("cargo metadata runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// The workspace's own packages, as `cargo metadata` describes them.
fn members(meta: &Value) -> impl Iterator<Item = &Value> {
    let members: BTreeSet<&str> = meta["workspace_members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap())
        .collect();
    meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(move |p| members.contains(p["id"].as_str().unwrap()))
}

/// Each workspace package's name, with the names of its normal (not dev, not build)
/// dependencies, and where its manifest lives.
fn workspace_packages(meta: &Value) -> BTreeMap<String, (PathBuf, BTreeSet<String>)> {
    members(meta)
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| d["kind"].is_null())
                .map(|d| d["name"].as_str().unwrap().to_owned())
                .collect();
            let manifest = PathBuf::from(p["manifest_path"].as_str().unwrap());
            (p["name"].as_str().unwrap().to_owned(), (manifest, deps))
        })
        .collect()
}

#[test]
fn no_service_depends_on_another_service() {
    let meta = metadata();
    let packages = workspace_packages(&meta);
    let services_dir = workspace_root().join("services");
    let services: BTreeSet<&String> = packages
        .iter()
        .filter(|(_, (manifest, _))| manifest.starts_with(&services_dir))
        .map(|(name, _)| name)
        .collect();
    assert!(services.len() >= 3, "services found: {services:?}");
    for service in &services {
        let (_, deps) = &packages[*service];
        let others: Vec<&String> = deps.iter().filter(|d| services.contains(d)).collect();
        assert!(
            others.is_empty(),
            "{service} depends on the services {others:?}"
        );
    }
}

/// The gateway reaches other services only through the log and the bus: it embeds the
/// launcher (a library with a small surface) and no other service, so it holds no handle on
/// the scheduler, which the bus wakes.
#[test]
fn the_gateway_embeds_the_launcher_and_no_other_service() {
    let meta = metadata();
    let packages = workspace_packages(&meta);
    let services_dir = workspace_root().join("services");
    let (_, gateway) = &packages["berth-gateway"];
    let services: Vec<&String> = gateway
        .iter()
        .filter(|d| {
            packages
                .get(*d)
                .is_some_and(|(manifest, _)| manifest.starts_with(&services_dir))
        })
        .collect();
    assert_eq!(
        services,
        ["berth-launcher"],
        "the gateway depends on {services:?}"
    );
}

#[test]
fn the_domain_depends_on_no_io_crate() {
    let meta = metadata();
    let domain = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "berth-domain")
        .unwrap();
    let normal = domain["dependencies"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["kind"].is_null());
    let (optional, always): (Vec<&Value>, Vec<&Value>) =
        normal.partition(|d| d["optional"] == Value::Bool(true));
    let names = |deps: Vec<&Value>| -> BTreeSet<String> {
        deps.iter()
            .map(|d| d["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let allowed: BTreeSet<String> = ["serde", "serde_json", "chrono", "uuid", "thiserror"]
        .map(String::from)
        .into();
    let always = names(always);
    let extra: Vec<&String> = always.difference(&allowed).collect();
    assert!(
        extra.is_empty(),
        "berth-domain gained the dependencies {extra:?}"
    );
    // The optional dependencies: utoipa behind the `openapi` feature, so the payloads the API
    // answers with describe themselves, and schemars behind `schema`, so the events do (pure
    // data, no I/O; checked below with the rest).
    let optional = names(optional);
    assert!(
        optional.iter().all(|d| d == "utoipa" || d == "schemars"),
        "berth-domain gained the optional dependencies {optional:?}"
    );

    // Transitively, through the resolved graph's normal edges.
    let seen = normal_closure(&meta, "berth-domain");
    const IO: &[&str] = &[
        "tokio", "postgres", "nats", "bollard", "hyper", "deadpool", "reqwest", "axum",
    ];
    let reached: Vec<&String> = seen
        .iter()
        .filter(|id| IO.iter().any(|io| id.contains(io)))
        .collect();
    assert!(
        reached.is_empty(),
        "berth-domain reaches I/O crates: {reached:?}"
    );
}

/// The ids of every package `package` reaches through normal (not dev, not build) edges of
/// the resolved graph, itself included.
fn normal_closure(meta: &Value, package: &str) -> BTreeSet<String> {
    let nodes: BTreeMap<&str, &Value> = meta["resolve"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["id"].as_str().unwrap(), n))
        .collect();
    let root = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == package)
        .map(|p| p["id"].as_str().unwrap())
        .unwrap_or_else(|| panic!("no package {package}"));
    let mut seen = BTreeSet::new();
    let mut todo = vec![root];
    while let Some(id) = todo.pop() {
        if !seen.insert(id.to_owned()) {
            continue;
        }
        for dep in nodes[id]["deps"].as_array().unwrap() {
            let normal = dep["dep_kinds"]
                .as_array()
                .unwrap()
                .iter()
                .any(|k| k["kind"].is_null());
            if normal {
                todo.push(dep["pkg"].as_str().unwrap());
            }
        }
    }
    seen
}

/// Agents speak only NATS (rule 8 of the brief): no database client reaches the agent, so an
/// agent host holds no database credential and could not use one.
#[test]
fn no_database_client_reaches_the_agent() {
    let meta = metadata();
    let reached: Vec<String> = normal_closure(&meta, "berth-agent")
        .into_iter()
        .filter(|id| {
            ["postgres", "deadpool", "berth-events"]
                .iter()
                .any(|db| id.contains(db))
        })
        .collect();
    assert!(reached.is_empty(), "berth-agent reaches {reached:?}");
    // The check sees a database client where there is one.
    let events = normal_closure(&meta, "berth-events");
    assert!(events.iter().any(|id| id.contains("tokio-postgres")));
}

/// The `berth` that operators run links nothing only tests and benchmarks need: no test kit
/// (scratch servers), no rcgen (its certificate authority) and no benchmark.
#[test]
fn the_product_links_no_test_kit_and_no_benchmark() {
    let meta = metadata();
    let test_only = ["berth-testkit", "berth-bench", "rcgen"];
    let reached: Vec<String> = normal_closure(&meta, "berth")
        .into_iter()
        .filter(|id| test_only.iter().any(|t| id.contains(t)))
        .collect();
    assert!(reached.is_empty(), "berth reaches {reached:?}");
    // The check sees them where they are.
    let bench = normal_closure(&meta, "berth-bench");
    for t in test_only {
        assert!(bench.iter().any(|id| id.contains(t)), "berth-bench: no {t}");
    }
}

/// Each workspace library's name (as code writes it) and its root source file.
fn workspace_libraries(meta: &Value) -> BTreeMap<String, PathBuf> {
    members(meta)
        .flat_map(|p| p["targets"].as_array().unwrap())
        .filter(|t| t["kind"].as_array().unwrap().iter().any(|k| k == "lib"))
        .map(|t| {
            (
                t["name"].as_str().unwrap().replace('-', "_"),
                PathBuf::from(t["src_path"].as_str().unwrap()),
            )
        })
        .collect()
}

fn architecture() -> String {
    fs::read_to_string(workspace_root().join("docs/ARCHITECTURE.md")).unwrap()
}

/// The tables `sql` makes (`CREATE TABLE [IF NOT EXISTS] name`), as written.
fn tables_made(sql: &str) -> Vec<String> {
    let create =
        Regex::new(r"(?i)\bCREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?([A-Za-z_][A-Za-z0-9_.]*)")
            .unwrap();
    create.captures_iter(sql).map(|c| c[1].to_owned()).collect()
}

/// Whether the backbone's migrations may make `table`: the log's and its readers' tables, the
/// ledger's, or the secrets the ledger's commands keep beside it (out of the log, erasable).
fn backbone_table(table: &str) -> bool {
    const LOG: &[&str] = &[
        "events",
        "event_seals",
        "event_seal_blocks",
        "audit_head",
        "checkpoints",
        "processed_events",
    ];
    LOG.contains(&table) || table.starts_with("ledger.") || table.starts_with("secrets.")
}

#[test]
fn the_backbones_migrations_make_only_the_logs_and_the_ledgers_tables() {
    let dir = workspace_root().join("events/migrations");
    let mut made = Vec::new();
    for entry in fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let sql = fs::read_to_string(&path).unwrap();
        for table in tables_made(&sql) {
            made.push((
                path.file_name().unwrap().to_string_lossy().into_owned(),
                table,
            ));
        }
    }
    assert!(made.len() > 20, "found only {made:?}");
    let strays: Vec<String> = made
        .iter()
        .filter(|(_, table)| !backbone_table(table))
        .map(|(file, table)| format!("{file}: {table}"))
        .collect();
    assert!(
        strays.is_empty(),
        "a service's tables belong in its own schema, migrated by its crate:\n{}",
        strays.join("\n")
    );
}

#[test]
fn the_migration_check_sees_a_services_table_in_the_backbone() {
    let planted = "CREATE TABLE IF NOT EXISTS session_logs (id uuid);\n\
                   create table ledger.sessions (id uuid);";
    let made = tables_made(planted);
    assert_eq!(made, ["session_logs", "ledger.sessions"]);
    assert!(!backbone_table(&made[0]) && backbone_table(&made[1]));
}

#[test]
fn the_code_map_names_only_what_exists() {
    let libraries = workspace_libraries(&metadata());
    assert!(libraries.contains_key("events"), "{libraries:?}");
    let map = architecture();
    let named = code_map::code_spans(&map)
        .iter()
        .filter(|s| code_map::name_of(s).is_some())
        .count();
    assert!(named > 50, "the map names only {named} paths and items");
    let missing = code_map::dangling(&map, &workspace_root(), &libraries);
    assert!(
        missing.is_empty(),
        "docs/ARCHITECTURE.md names what the tree does not have (rename it there too):\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_code_map_check_sees_a_renamed_path_and_a_renamed_item() {
    let libraries = workspace_libraries(&metadata());
    let map = architecture();
    for (name, renamed) in [
        ("`events/src/store.rs`", "`events/src/stores.rs`"),
        ("`events::ledger::record`", "`events::ledger::records`"),
    ] {
        assert!(map.contains(name), "the map no longer names {name}");
        let changed = map.replace(name, renamed);
        let missing = code_map::dangling(&changed, &workspace_root(), &libraries);
        assert!(
            missing
                .iter()
                .any(|m| m.contains(renamed.trim_matches('`'))),
            "a map naming {renamed} passed: {missing:?}"
        );
    }
}

/// The gateway's floors, lowest first: a module imports only from its own floor or one below
/// (`docs/ARCHITECTURE.md`, "the gateway's floors"). The base (errors, answer types, shared
/// handles; then the state and the reads; then who is calling) stands under the surfaces (the
/// REST API and its event stream; the console and Backend.AI's API), which the router composes.
const GATEWAY_FLOORS: &[&[&str]] = &[
    &[
        "error", "model", "handles", "headers", "live", "metrics", "throttle", "tls",
    ],
    &[
        "state",
        "db",
        "cache",
        "projection",
        "proxy",
        "serving",
        "files",
        "uploads",
    ],
    &["caller", "ready", "authorize"],
    &["api", "sse"],
    &["console", "backendai"],
    &["lib", "run", "openapi"],
];

/// The floor of the gateway module `room` (its top-level module; `lib` for the crate root).
fn gateway_floor(room: &str) -> Option<usize> {
    GATEWAY_FLOORS
        .iter()
        .position(|floor| floor.contains(&room))
}

/// The gateway's top-level module a file under `gateway/src/` belongs to, and the module path
/// of the file itself (`api/admin/users.rs` is `api::admin::users`).
fn gateway_room(relative: &str) -> (String, Vec<String>) {
    let mut path: Vec<String> = relative
        .trim_end_matches(".rs")
        .split('/')
        .map(str::to_owned)
        .collect();
    if path.last().is_some_and(|last| last == "mod") || path == ["lib"] {
        path.pop();
    }
    let room = path.first().cloned().unwrap_or_else(|| "lib".to_owned());
    (room, path)
}

/// The production part of a source file: the file without its `#[cfg(test)] mod`s (each
/// cut to its closing brace).
fn production_part(text: &str) -> String {
    let tests = Regex::new(r"#\[cfg\(test\)\]\s*(pub(\(crate\))?\s+)?mod\s[^{;]*\{").unwrap();
    let mut kept = String::new();
    let mut rest = text;
    while let Some(m) = tests.find(rest) {
        kept.push_str(&rest[..m.start()]);
        let mut depth = 1;
        let mut end = rest.len();
        for (i, c) in rest[m.end()..].char_indices() {
            depth += match c {
                '{' => 1,
                '}' => -1,
                _ => 0,
            };
            if depth == 0 {
                end = m.end() + i + 1;
                break;
            }
        }
        // Lines are kept, so a finding's line number is the file's.
        kept.extend(rest[m.start()..end].matches('\n').map(|_| '\n'));
        rest = &rest[end..];
    }
    kept.push_str(rest);
    kept
}

/// Each top-level module the code of `text` (the file at module path `module`) names through
/// a `crate::` or `super::` path, with the line: `crate::{a, b::c}` names `a` and `b`, and a
/// crate-root item (`crate::router`) names `lib`. Comment lines are not code.
fn gateway_imports(
    text: &str,
    module: &[String],
    rooms: &BTreeSet<String>,
) -> Vec<(usize, String)> {
    let path = Regex::new(r"\b(crate|super)((?:::super)*)::(\{|[A-Za-z_][A-Za-z0-9_]*)").unwrap();
    let mut found = Vec::new();
    let mut line_start = 0;
    for (index, line) in text.lines().enumerate() {
        let at = line_start;
        line_start += line.len() + 1;
        if line.trim_start().starts_with("//") {
            continue;
        }
        for m in path.captures_iter(line) {
            let base: Vec<String> = if &m[1] == "crate" {
                Vec::new()
            } else {
                let up = 1 + m[2].matches("super").count();
                module[..module.len().saturating_sub(up)].to_vec()
            };
            let firsts: Vec<String> = if &m[3] == "{" {
                // The names at the group's first level, read on to its closing brace.
                let start = at + m.get(0).unwrap().end();
                let (mut depth, mut name, mut names) = (1, String::new(), Vec::new());
                for c in text[start..].chars() {
                    match c {
                        '{' => depth += 1,
                        '}' => depth -= 1,
                        ',' if depth == 1 => names.push(std::mem::take(&mut name)),
                        _ if depth == 1 => name.push(c),
                        _ => {}
                    }
                    if depth == 0 {
                        names.push(name);
                        break;
                    }
                }
                names
                    .iter()
                    .filter_map(|n| n.split("::").next().map(|s| s.trim().to_owned()))
                    .filter(|n| !n.is_empty())
                    .collect()
            } else {
                vec![m[3].to_owned()]
            };
            for first in firsts {
                let top = base.first().cloned().unwrap_or(first);
                if top == "self" {
                    continue;
                }
                let room = if rooms.contains(&top) {
                    top
                } else {
                    "lib".to_owned()
                };
                found.push((index + 1, room));
            }
        }
    }
    found
}

/// Every import of a gateway module from a floor above its own, as `file:line: ...`.
fn upward_imports(root: &Path) -> Vec<String> {
    let src = root.join("gateway/src");
    let mut files = Vec::new();
    source_files(&src, &mut files);
    let rooms: BTreeSet<String> = fs::read_dir(&src)
        .unwrap()
        .map(|e| {
            e.unwrap()
                .file_name()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_owned()
        })
        .filter(|name| !name.contains('.'))
        .collect();
    let floor_of = |room: &str| {
        gateway_floor(room).unwrap_or_else(|| {
            panic!("gateway/src/{room} is on no floor: add it to GATEWAY_FLOORS in tests/tidy.rs")
        })
    };
    let mut offences = Vec::new();
    for path in files {
        let relative = path
            .strip_prefix(&src)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        let (room, module) = gateway_room(&relative);
        let text = fs::read_to_string(&path).unwrap();
        for (line, target) in gateway_imports(&production_part(&text), &module, &rooms) {
            let (from, to) = (floor_of(&room), floor_of(&target));
            if to > from {
                offences.push(format!(
                    "gateway/src/{relative}:{line}: `{room}` (floor {from}: {}) imports `{target}` (floor {to}: {})",
                    GATEWAY_FLOORS[from].join(", "),
                    GATEWAY_FLOORS[to].join(", "),
                ));
            }
        }
    }
    offences
}

#[test]
fn the_gateway_imports_only_from_its_own_floor_or_below() {
    let offences = upward_imports(&workspace_root());
    assert!(
        offences.is_empty(),
        "a gateway module imports from a floor above its own (move the item down, or the \
         caller up; floors in tests/tidy.rs GATEWAY_FLOORS):\n{}",
        offences.join("\n")
    );
}

#[test]
fn the_floor_check_reads_crate_super_and_grouped_paths() {
    let rooms: BTreeSet<String> = ["api", "caller", "state", "error", "console"]
        .map(str::to_owned)
        .into();
    let module = |path: &str| gateway_room(path).1;
    let text = "use super::super::super::caller::Caller;\nuse crate::{error::ApiError, state};\n\
                // crate::console::x in a comment\nlet r = crate::router(s);\nuse super::parse_body;";
    let found = gateway_imports(text, &module("api/admin/users.rs"), &rooms);
    let names: Vec<(usize, &str)> = found.iter().map(|(l, r)| (*l, r.as_str())).collect();
    assert_eq!(
        names,
        [
            (1, "caller"),
            (2, "error"),
            (2, "state"),
            (4, "lib"),
            (5, "api")
        ]
    );
    assert_eq!(
        gateway_room("sse.rs"),
        ("sse".to_owned(), vec!["sse".to_owned()])
    );
    assert_eq!(gateway_room("lib.rs").0, "lib");
    let plain = "fn a() {}\n#[cfg(test)]\nmod tests {\n use crate::console::x;\n}";
    assert!(!production_part(plain).contains("console"));
}

/// `docs/ARCHITECTURE.md`: `model.rs` holds every body the API answers with, so a change to
/// what a client reads is one file's change. An answer is a type that serializes and has a
/// schema; error bodies are `error.rs`'s. A request body that a handler under `api/` reads
/// (it derives `Deserialize` too) may also serialize, for the client that sends it
/// (`berth admin` sends the admin requests it builds from its flags).
#[test]
fn the_gateway_answers_only_with_types_of_its_model() {
    let root = workspace_root();
    let src = root.join("gateway/src");
    let mut files = Vec::new();
    source_files(&src, &mut files);
    let derive = Regex::new(r"#\[derive\(([^\]]*)\)\]").unwrap();
    let mut offences = Vec::new();
    for path in files {
        let relative = path
            .strip_prefix(&src)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        if relative == "model.rs" || relative == "error.rs" {
            continue;
        }
        let text = fs::read_to_string(&path).unwrap();
        let text = production_part(&text);
        for m in derive.captures_iter(&text) {
            let traits = &m[1];
            let request = relative.starts_with("api/") && traits.contains("Deserialize");
            if traits.contains("Serialize") && traits.contains("ToSchema") && !request {
                let line = text[..m.get(0).unwrap().start()].matches('\n').count() + 1;
                offences.push(format!("gateway/src/{relative}:{line}"));
            }
        }
    }
    assert!(
        offences.is_empty(),
        "an answer type outside gateway/src/model.rs (move it there):\n{}",
        offences.join("\n")
    );
}
