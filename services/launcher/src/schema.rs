//! A create request as the OpenAPI document states it. `CreateSession` derives its schema
//! (utoipa); this module holds what a derive cannot say, beside the rules in
//! [`domain`](crate::domain) and [`decide`](crate::decide) that it restates: the patterns of
//! names, the bounds of list items and sizes, and the cross-field rules JSON Schema can
//! express. Tests hold each pattern to the function that enforces the rule.
//!
//! One rule is not stated: shared memory at most the memory asked for (two sizes, each a
//! number or text with a unit, cannot be compared by a schema). It is a 422 naming
//! `resources.shared_memory`.

use serde_json::json;
use utoipa::openapi::schema::Schema;
use utoipa::openapi::RefOr;

/// Session names: 4 to 64 ASCII letters and digits ([`domain::check_name`](crate::domain::check_name)).
pub const NAME_PATTERN: &str = "^[A-Za-z0-9]{4,64}$";
/// Folder names ([`domain::check_folder_name`](crate::domain::check_folder_name)).
pub const FOLDER_PATTERN: &str = "^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,63}$";
/// Environment variable names ([`domain::check_environment`](crate::domain::check_environment)),
/// at most 128 characters here.
pub const ENVIRONMENT_NAME_PATTERN: &str = "^[A-Za-z_][A-Za-z0-9_]{0,127}$";
/// Names of groups, projects, presets and agents (a project's held to it by
/// [`domain::check_project_name`](crate::domain::check_project_name) before anything is
/// loaded; the others are looked up, and a name no object has is unknown).
pub const OBJECT_PATTERN: &str = "^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$";
/// A size as text: 1 to 9999.999 of a unit (none for bytes; k, m, g; `i` and `b` allowed).
/// The server takes more (`t`, larger numbers up to 64 TiB, fractions below one); the
/// document states a part that is always within bounds.
pub const SIZE_TEXT_PATTERN: &str = "^[1-9][0-9]{0,3}(\\.[0-9]{1,3})?[kKmMgG]?[iI]?[bB]?$";
/// The largest size in bytes the server takes (64 TiB).
pub const MAX_SIZE_BYTES: u64 = 64 << 40;

fn schema(value: serde_json::Value) -> RefOr<Schema> {
    match serde_json::from_value(value.clone()) {
        Ok(schema) => RefOr::T(schema),
        Err(e) => panic!("{value} is not a schema utoipa reads: {e}"),
    }
}

/// `memory` and `shared_memory`: bytes, or text with a unit.
pub fn size() -> RefOr<Schema> {
    schema(json!({
        "oneOf": [
            {"type": "integer", "minimum": 1, "maximum": MAX_SIZE_BYTES},
            {"type": "string", "pattern": SIZE_TEXT_PATTERN},
        ],
        "description": "bytes, or a number with a unit: `512m`, `4g`, `1Gi`",
    }))
}

/// `environment`: variable names to values.
pub fn environment() -> RefOr<Schema> {
    schema(json!({
        "type": "object",
        "propertyNames": {"type": "string", "pattern": ENVIRONMENT_NAME_PATTERN},
        "additionalProperties": {"type": "string", "pattern": "^[^\\u0000]*$"},
    }))
}

/// `preopen_ports`: container ports to publish, each once.
pub fn ports() -> RefOr<Schema> {
    schema(json!({
        "type": "array",
        "uniqueItems": true,
        "items": {"type": "integer", "minimum": 1024, "maximum": 65535},
    }))
}

/// `mounts`: names of the owner's folders, mounted under /home/work.
pub fn mounts() -> RefOr<Schema> {
    schema(json!({"type": "array", "items": {"type": "string", "pattern": FOLDER_PATTERN}}))
}

/// The rules between fields of a create request, as JSON Schema (`allOf` members; an image,
/// a preset, cores and memory are each optional: what is left out is the group's default):
/// - a batch session needs a startup command that is not blank; only a batch session takes
///   a start time or a timeout;
/// - with `count` above 1, `name` is a base that is numbered (`job` gives `job1`, ...), so
///   it may be 3 to 61 characters; otherwise 4 to 64.
pub fn cross_field_rules() -> serde_json::Value {
    let batch = json!({"properties": {"type": {"const": "batch"}}, "required": ["type"]});
    json!([
        {"if": batch,
         "then": {"required": ["startup_command"],
                  "properties": {"startup_command": {"type": "string", "pattern": "\\S"}}},
         "else": {"properties": {"starts_at": {"type": "null"}, "batch_timeout": {"type": "null"}}}},
        {"if": {"properties": {"count": {"type": "integer", "minimum": 2}}, "required": ["count"]},
         "then": {"properties": {"name": {"type": ["string", "null"], "pattern": "^[A-Za-z0-9]{3,61}$"}}},
         "else": {"properties": {"name": {"type": ["string", "null"], "pattern": NAME_PATTERN}}}},
    ])
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use regex::Regex;

    use super::*;
    use crate::domain;

    /// Each pattern the document states accepts exactly what the rule's function accepts,
    /// on names at and around every edge of the rule.
    #[test]
    fn every_field_schema_is_one_utoipa_reads_back_whole() {
        for (made, field) in [
            (size(), "size"),
            (environment(), "environment"),
            (ports(), "ports"),
            (mounts(), "mounts"),
        ] {
            let text = serde_json::to_string(&made).unwrap();
            assert!(!text.is_empty(), "{field}");
        }
        let environment = serde_json::to_value(environment()).unwrap();
        assert_eq!(
            environment["propertyNames"]["pattern"],
            ENVIRONMENT_NAME_PATTERN
        );
        let ports = serde_json::to_value(ports()).unwrap();
        assert_eq!(ports["uniqueItems"], true, "{ports}");
        assert_eq!(ports["items"]["maximum"], 65535, "{ports}");
        let size = serde_json::to_value(size()).unwrap();
        assert_eq!(size["oneOf"][1]["pattern"], SIZE_TEXT_PATTERN, "{size}");
    }

    /// The derive takes patterns only as literals; these are the module's, letter for letter.
    #[test]
    fn the_derived_request_schema_states_this_modules_patterns() {
        use utoipa::PartialSchema;
        let request = serde_json::to_value(crate::launch::CreateSession::schema()).unwrap();
        for field in ["resource_group", "project", "preset", "agent"] {
            assert_eq!(
                request["properties"][field]["pattern"], OBJECT_PATTERN,
                "{field}"
            );
        }
        assert_eq!(
            request["properties"]["name"]["pattern"],
            "^[A-Za-z0-9]{3,64}$"
        );
        assert_eq!(request["additionalProperties"], false, "{request}");
        // Free text the server stores: no NUL character (PostgreSQL text cannot hold one).
        for field in ["image", "startup_command"] {
            let pattern = request["properties"][field]["pattern"].as_str().unwrap();
            let pattern = Regex::new(pattern).unwrap();
            assert!(!pattern.is_match("a\u{0}b"), "{field}");
            assert!(pattern.is_match("berth/shell:latest"), "{field}");
        }
        let image =
            Regex::new(request["properties"]["image"]["pattern"].as_str().unwrap()).unwrap();
        assert!(!image.is_match(" \t"), "a blank image is refused");
    }

    #[test]
    fn the_stated_patterns_agree_with_the_rules() {
        let long = |n: usize| "a".repeat(n);
        let samples: Vec<String> = [
            "",
            "a",
            "abc",
            "abcd",
            "job1",
            "Job_1",
            "a-b",
            ".hidden",
            "_x",
            "-x",
            "x.y",
            "1abc",
            "a b",
            "a/b",
            "..",
            "é",
            "a\u{0}b",
            "a*",
            "ABC_def_9",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain([
            long(63),
            long(64),
            long(65),
            long(127),
            long(128),
            long(129),
        ])
        .collect();
        let name = Regex::new(NAME_PATTERN).unwrap();
        let folder = Regex::new(FOLDER_PATTERN).unwrap();
        let variable = Regex::new(ENVIRONMENT_NAME_PATTERN).unwrap();
        let object = Regex::new(OBJECT_PATTERN).unwrap();
        for s in &samples {
            assert_eq!(
                object.is_match(s),
                domain::check_project_name("p", s).is_ok(),
                "project {s:?}"
            );
            assert_eq!(
                name.is_match(s),
                domain::check_name("n", s).is_ok(),
                "name {s:?}"
            );
            assert_eq!(
                folder.is_match(s),
                domain::check_folder_name("f", s).is_ok(),
                "folder {s:?}"
            );
            // The schema caps variable names at 128 characters; the rule does not.
            let env = BTreeMap::from([(s.clone(), "v".to_owned())]);
            if s.len() <= 128 {
                assert_eq!(
                    variable.is_match(s),
                    domain::check_environment(&env).is_ok(),
                    "variable {s:?}"
                );
            } else {
                assert!(!variable.is_match(s));
            }
        }
    }

    /// Every size the text pattern admits is taken by the server, above zero and within
    /// 64 TiB.
    #[test]
    fn a_size_the_schema_admits_is_one_the_server_takes() {
        let text = Regex::new(SIZE_TEXT_PATTERN).unwrap();
        for s in [
            "1",
            "9999.999g",
            "512m",
            "4G",
            "1Gi",
            "1GiB",
            "1.5k",
            "0",
            "0.5g",
            "10000g",
            "1t",
        ] {
            let taken = crate::launch::ByteSize::Text(s.into())
                .bytes("memory")
                .is_ok_and(|b| b > 0 && b <= MAX_SIZE_BYTES);
            if text.is_match(s) {
                assert!(taken, "{s} is schema-valid but refused");
            }
        }
        assert!(!text.is_match("0") && !text.is_match("1t") && text.is_match("9999.999g"));
    }
}
