//! Query strings read into typed parameter structs. Each struct's OpenAPI description
//! (utoipa's `IntoParams`) is also its rule book, so the document and the server cannot
//! disagree: a parameter the struct does not declare is refused by name; an empty value, a
//! value holding a NUL character, or a parameter given twice is refused; a value of an
//! enumeration matches in any case; an integer outside the declared minimum and maximum is
//! refused. Every refusal is a 422 naming the parameter.

use serde::de::DeserializeOwned;
use serde_json::Value;
use utoipa::openapi::path::ParameterIn;
use utoipa::IntoParams;

use crate::error::ApiError;

/// PostgreSQL text cannot hold a NUL character, so no value may carry one.
pub(crate) const NUL_REFUSED: &str = "may not contain a NUL character";

/// What the document declares of one query parameter: its name and schema, as JSON.
struct Declared {
    name: String,
    schema: Value,
}

fn declared<T: IntoParams>() -> Vec<Declared> {
    T::into_params(|| Some(ParameterIn::Query))
        .into_iter()
        .map(|p| Declared {
            name: p.name.clone(),
            schema: serde_json::to_value(&p.schema).unwrap_or(Value::Null),
        })
        .collect()
}

/// The first value of `key` in `schema` or in one of its alternatives (`oneOf`, `anyOf`,
/// `allOf`), where an optional parameter's schema keeps what it says about present values.
fn find<'a>(schema: &'a Value, key: &str) -> Option<&'a Value> {
    if let Some(found) = schema.get(key) {
        return Some(found);
    }
    ["oneOf", "anyOf", "allOf"]
        .iter()
        .filter_map(|k| schema.get(k).and_then(Value::as_array))
        .flatten()
        .find_map(|alternative| find(alternative, key))
}

/// Parses the query string `raw` into `T` by the rules above.
pub(crate) fn parse<T: DeserializeOwned + IntoParams>(raw: Option<&str>) -> Result<T, ApiError> {
    let declared = declared::<T>();
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(raw.unwrap_or(""))
        .map_err(|e| ApiError::invalid("query", format!("is not a query string: {e}")))?;
    let mut checked: Vec<(String, String)> = Vec::with_capacity(pairs.len());
    for (name, value) in pairs {
        let Some(param) = declared.iter().find(|d| d.name == name) else {
            let known: Vec<&str> = declared.iter().map(|d| d.name.as_str()).collect();
            return Err(ApiError::invalid(
                name,
                format!("unknown parameter; known: {}", known.join(", ")),
            ));
        };
        if checked.iter().any(|(seen, _)| *seen == name) {
            return Err(ApiError::invalid(name, "is given more than once"));
        }
        // `?status=` says nothing: refused, so a client learns it sent an empty value.
        if value.is_empty() {
            return Err(ApiError::invalid(
                name,
                "is empty: give a value or leave the parameter out",
            ));
        }
        if value.contains('\0') {
            return Err(ApiError::invalid(name, NUL_REFUSED));
        }
        let value = normalised(param, value)?;
        checked.push((name, value));
    }
    let encoded = serde_urlencoded::to_string(&checked)
        .map_err(|e| ApiError::invalid("query", e.to_string()))?;
    let deserializer =
        serde_urlencoded::Deserializer::new(form_urlencoded::parse(encoded.as_bytes()));
    serde_path_to_error::deserialize(deserializer).map_err(|e| {
        let field = e.path().to_string();
        let field = if field == "." { "query".into() } else { field };
        ApiError::invalid(field, e.into_inner().to_string())
    })
}

/// `value` as the declared schema spells it: an enumeration's member in its own case, an
/// integer checked against the declared range.
fn normalised(param: &Declared, value: String) -> Result<String, ApiError> {
    if let Some(members) = find(&param.schema, "enum").and_then(Value::as_array) {
        let names: Vec<&str> = members.iter().filter_map(Value::as_str).collect();
        return names
            .iter()
            .find(|m| m.eq_ignore_ascii_case(&value))
            .map(|m| (*m).to_owned())
            .ok_or_else(|| {
                ApiError::invalid(&param.name, format!("must be one of {}", names.join(", ")))
            });
    }
    let integer = find(&param.schema, "type").is_some_and(|t| match t {
        Value::String(t) => t == "integer",
        Value::Array(ts) => ts.iter().any(|t| t == "integer"),
        _ => false,
    });
    if integer {
        let min = find(&param.schema, "minimum").and_then(Value::as_i64);
        let max = find(&param.schema, "maximum").and_then(Value::as_i64);
        // `95.0` is an integer to JSON Schema, so to this parser too.
        let number = value.parse::<i64>().ok().or_else(|| {
            value
                .parse::<f64>()
                .ok()
                .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e18)
                .map(|f| f as i64)
        });
        let within = number.filter(|n| min.is_none_or(|m| *n >= m) && max.is_none_or(|m| *n <= m));
        if within.is_none() {
            let range = match (min, max) {
                (Some(min), Some(max)) => format!("a number from {min} to {max}"),
                (Some(min), None) => format!("a number of at least {min}"),
                (None, Some(max)) => format!("a number of at most {max}"),
                (None, None) => "a whole number".to_owned(),
            };
            return Err(ApiError::invalid(&param.name, format!("must be {range}")));
        }
        return Ok(within.map(|n| n.to_string()).unwrap_or(value));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;
    use serde::Deserialize;

    #[derive(Debug, Deserialize, utoipa::ToSchema, PartialEq, Clone, Copy)]
    #[serde(rename_all = "lowercase")]
    enum Colour {
        Red,
        Blue,
    }

    #[derive(Debug, Deserialize, IntoParams)]
    #[into_params(parameter_in = Query)]
    struct Sample {
        #[param(minimum = 1, maximum = 500)]
        limit: Option<i64>,
        #[param(inline)]
        colour: Option<Colour>,
        owner: Option<String>,
    }

    fn refused(raw: &str) -> (StatusCode, Option<String>, String) {
        let e = parse::<Sample>(Some(raw)).expect_err(raw);
        (e.status, e.field, e.message)
    }

    #[test]
    fn a_query_is_read_into_its_struct_with_enums_in_any_case() {
        let s: Sample = parse(Some("limit=500&colour=RED&owner=a%40b.c")).unwrap();
        assert_eq!(s.limit, Some(500));
        let s: Sample = parse(Some("limit=95.0")).unwrap();
        assert_eq!(s.limit, Some(95), "an integer to JSON Schema");
        let s: Sample = parse(Some("limit=500&colour=RED&owner=a%40b.c")).unwrap();
        assert_eq!(
            (s.limit, s.colour, s.owner.as_deref()),
            (Some(500), Some(Colour::Red), Some("a@b.c"))
        );
        let s: Sample = parse(None).unwrap();
        assert_eq!((s.limit, s.colour, s.owner), (None, None, None));
    }

    #[test]
    fn what_the_declaration_forbids_is_refused_by_the_parameter_name() {
        for (raw, field, says) in [
            ("limit=0", "limit", "from 1 to 500"),
            ("limit=501", "limit", "from 1 to 500"),
            ("limit=lots", "limit", "from 1 to 500"),
            ("limit=9.5", "limit", "from 1 to 500"),
            ("colour=green", "colour", "one of red, blue"),
            (
                "shade=red",
                "shade",
                "unknown parameter; known: limit, colour, owner",
            ),
            ("owner=", "owner", "is empty"),
            ("owner=a%00b", "owner", "NUL"),
            ("owner=a&owner=b", "owner", "more than once"),
        ] {
            let (status, got, message) = refused(raw);
            assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{raw}");
            assert_eq!(got.as_deref(), Some(field), "{raw}");
            assert!(message.contains(says), "{raw}: {message}");
        }
    }
}
