//! The rules a session create request must follow (from Backend.AI's "Start a new session"),
//! as pure functions. Every problem names the field it is about, so the gateway can answer
//! with a 4xx that says exactly what to fix.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use events::payloads::{ClusterMode, SessionType};

/// One thing wrong with a request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

fn problem(field: impl Into<String>, message: impl Into<String>) -> FieldError {
    FieldError {
        field: field.into(),
        message: message.into(),
    }
}

/// Session names: 4 to 64 ASCII letters and digits (the seeds' rule, also for renames).
pub fn check_name(field: &str, name: &str) -> Result<(), FieldError> {
    let length = name.chars().count();
    if !(4..=64).contains(&length) {
        return Err(problem(
            field,
            format!("must be 4 to 64 characters, not {length}"),
        ));
    }
    if let Some(bad) = name.chars().find(|c| !c.is_ascii_alphanumeric()) {
        return Err(problem(
            field,
            format!("may hold only letters and digits, not {bad:?}"),
        ));
    }
    Ok(())
}

/// A project's name as a request gives it: a letter or digit, then up to 63 letters, digits,
/// `_`, `.` or `-` (the pattern the API documents). Checked before anyone is looked up, so a
/// superadmin, who may name a project they are no member of, cannot name one no rule allows.
pub fn check_project_name(field: &str, name: &str) -> Result<(), FieldError> {
    let length = name.chars().count();
    if !(1..=64).contains(&length) {
        return Err(problem(
            field,
            format!("must be 1 to 64 characters, not {length}"),
        ));
    }
    if !name.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return Err(problem(field, "must begin with a letter or a digit"));
    }
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-');
    if let Some(bad) = name.chars().find(|c| !allowed(*c)) {
        return Err(problem(
            field,
            format!("may hold only letters, digits, `_`, `.` and `-`, not {bad:?}"),
        ));
    }
    Ok(())
}

/// Which rule a session's name follows: the seeds' (berth's own API) or Backend.AI's (its
/// compatibility paths, whose client names sessions `pysdk-...` by default).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum NameRule {
    #[default]
    Berth,
    BackendAi,
}

impl NameRule {
    /// Checks `name` by this rule.
    pub fn check(self, field: &str, name: &str) -> Result<(), FieldError> {
        match self {
            NameRule::Berth => check_name(field, name),
            NameRule::BackendAi => check_backendai_name(field, name),
        }
    }
}

/// Session names as Backend.AI takes them: 4 to 64 ASCII characters, letters, digits and `_`
/// at both ends, and also `-` and `.` between.
pub fn check_backendai_name(field: &str, name: &str) -> Result<(), FieldError> {
    let length = name.chars().count();
    if !(4..=64).contains(&length) {
        return Err(problem(
            field,
            format!("must be 4 to 64 characters, not {length}"),
        ));
    }
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    if let Some(bad) = name.chars().find(|&c| !word(c) && c != '-' && c != '.') {
        return Err(problem(
            field,
            format!("may hold only letters, digits, `_`, `-` and `.`, not {bad:?}"),
        ));
    }
    let ends = [name.chars().next(), name.chars().last()];
    if ends.into_iter().flatten().any(|c| !word(c)) {
        return Err(problem(
            field,
            "must begin and end with a letter, a digit or `_`",
        ));
    }
    Ok(())
}

/// Preopen ports: each in 1024..=65535, no repeats.
pub fn check_ports(ports: &[u32]) -> Result<Vec<u16>, FieldError> {
    let mut seen = Vec::with_capacity(ports.len());
    for (i, &port) in ports.iter().enumerate() {
        if !(1024..=65535).contains(&port) {
            return Err(problem(
                format!("preopen_ports[{i}]"),
                format!("{port} is not in 1024 to 65535"),
            ));
        }
        let port = port as u16;
        if seen.contains(&port) {
            return Err(problem(
                format!("preopen_ports[{i}]"),
                format!("{port} is listed twice"),
            ));
        }
        seen.push(port);
    }
    Ok(seen)
}

/// Variables a request may not set, by prefix or whole name: the NVIDIA container runtime
/// reads `NVIDIA_*` from a container's environment (`NVIDIA_VISIBLE_DEVICES=all` would hand a
/// session every GPU of the host), `CUDA_MPS_*` and `CUDA_VISIBLE_DEVICES` carry a GPU share's
/// limits and devices, and `BERTH_*` is what the agent tells a session about itself.
pub const RESERVED_PREFIXES: &[&str] = &["NVIDIA_", "CUDA_MPS_", "BERTH_"];
pub const RESERVED_NAMES: &[&str] = &["CUDA_VISIBLE_DEVICES"];

/// Whether `name` is a variable only berth sets (see [`RESERVED_PREFIXES`]). Compared as
/// written and in upper case, so `nvidia_visible_devices` is refused too.
pub fn reserved_variable(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    RESERVED_PREFIXES.iter().any(|p| upper.starts_with(p)) || RESERVED_NAMES.contains(&&*upper)
}

/// Environment variable names: a letter or `_` first, then letters, digits and `_`, and none
/// that only berth sets ([`reserved_variable`]).
pub fn check_environment(environment: &BTreeMap<String, String>) -> Result<(), FieldError> {
    for (name, value) in environment {
        if reserved_variable(name) {
            return Err(problem(
                format!("environment.{name}"),
                "is set by berth (GPU devices and limits, the session's own facts) and may not be asked for",
            ));
        }
        let mut chars = name.chars();
        let first_ok = chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
        if !first_ok || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(problem(
                format!("environment.{name}"),
                "is not a valid variable name",
            ));
        }
        if value.contains('\0') {
            return Err(problem(
                format!("environment.{name}"),
                "value holds a NUL byte",
            ));
        }
    }
    Ok(())
}

/// Folder names: 1 to 64 letters, digits, `_`, `-` and `.`, not starting with `.`, so a name
/// can never leave the owner's folder directory (no `/`, no `..`).
pub fn check_folder_name(field: &str, name: &str) -> Result<(), FieldError> {
    let ok = (1..=64).contains(&name.len())
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.');
    if ok {
        Ok(())
    } else {
        Err(problem(
            field,
            format!("`{name}` is not a folder name: 1 to 64 letters, digits, `_`, `-` or `.`, not starting with `.`"),
        ))
    }
}

/// The parts of a request whose rules depend on each other.
#[derive(Debug, Clone, PartialEq)]
pub struct Shape {
    pub session_type: SessionType,
    pub memory_bytes: u64,
    pub shared_memory_bytes: u64,
    pub cpu_milli: u64,
    pub startup_command: Option<String>,
    pub starts_at: Option<DateTime<Utc>>,
    pub batch_timeout_secs: Option<u64>,
    pub cluster_mode: ClusterMode,
    pub cluster_size: u32,
    pub omp_num_threads: Option<u32>,
}

/// Largest cluster berth starts for one session.
pub const MAX_CLUSTER_SIZE: u32 = 32;

/// Checks the cross-field rules and returns the OpenMP thread count to use (the session's
/// CPU count, rounded up, unless given).
pub fn check_shape(shape: &Shape) -> Result<u32, FieldError> {
    if shape.cpu_milli == 0 {
        return Err(problem("resources.cpu", "must be more than 0"));
    }
    if shape.memory_bytes == 0 {
        return Err(problem("resources.memory", "must be more than 0"));
    }
    if shape.shared_memory_bytes > shape.memory_bytes {
        return Err(problem(
            "resources.shared_memory",
            format!(
                "{} bytes is above the memory asked for ({} bytes)",
                shape.shared_memory_bytes, shape.memory_bytes
            ),
        ));
    }
    let batch = shape.session_type == SessionType::Batch;
    match (&shape.startup_command, batch) {
        (None, true) => return Err(problem("startup_command", "a batch session needs one")),
        (Some(c), true) if c.trim().is_empty() => {
            return Err(problem("startup_command", "a batch session needs one"))
        }
        _ => {}
    }
    if !batch && shape.starts_at.is_some() {
        return Err(problem(
            "starts_at",
            "only batch sessions take a start time",
        ));
    }
    if !batch && shape.batch_timeout_secs.is_some() {
        return Err(problem(
            "batch_timeout",
            "only batch sessions take a timeout",
        ));
    }
    if shape.batch_timeout_secs == Some(0) {
        return Err(problem("batch_timeout", "must be more than 0 seconds"));
    }
    if !(1..=MAX_CLUSTER_SIZE).contains(&shape.cluster_size) {
        return Err(problem(
            "cluster_size",
            format!(
                "must be 1 to {MAX_CLUSTER_SIZE}, not {}",
                shape.cluster_size
            ),
        ));
    }
    match shape.omp_num_threads {
        Some(0) => Err(problem("omp_num_threads", "must be at least 1")),
        Some(n) if n > MAX_OMP_THREADS => Err(problem(
            "omp_num_threads",
            format!("must be at most {MAX_OMP_THREADS}"),
        )),
        Some(n) => Ok(n),
        None => Ok(shape.cpu_milli.div_ceil(1000) as u32),
    }
}

/// The most OpenMP threads a session may ask for (more than any host's cores).
pub const MAX_OMP_THREADS: u32 = 1024;

/// A random name for a session that was given none: three words and four digits (about 176
/// million names), always a valid name.
pub fn random_name(rng: &mut impl rand::Rng) -> String {
    const WORDS: &[&str] = &[
        "amber", "brisk", "cedar", "delta", "ember", "fjord", "gale", "harbor", "iris", "jade",
        "kestrel", "lumen", "maple", "nova", "onyx", "pine", "quartz", "raven", "sierra", "tidal",
        "umber", "vale", "willow", "xenon", "yarrow", "zephyr",
    ];
    let mut name = String::new();
    for _ in 0..3 {
        let word = WORDS[rng.random_range(0..WORDS.len())];
        let mut chars = word.chars();
        if let Some(first) = chars.next() {
            name.push(first.to_ascii_uppercase());
            name.extend(chars);
        }
    }
    name.push_str(&format!("{:04}", rng.random_range(0..10_000)));
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    fn interactive() -> Shape {
        Shape {
            session_type: SessionType::Interactive,
            memory_bytes: 1 << 30,
            shared_memory_bytes: 64 << 20,
            cpu_milli: 2000,
            startup_command: None,
            starts_at: None,
            batch_timeout_secs: None,
            cluster_mode: ClusterMode::SingleNode,
            cluster_size: 1,
            omp_num_threads: None,
        }
    }

    #[test]
    fn names_are_4_to_64_letters_and_digits() {
        assert!(check_name("name", "abcd").is_ok());
        assert!(check_name("name", &"a".repeat(64)).is_ok());
        assert_eq!(check_name("name", "abc").unwrap_err().field, "name");
        assert!(check_name("name", &"a".repeat(65)).is_err());
        assert!(check_name("name", "my session").is_err());
        assert!(check_name("name", "my-session").is_err());
        assert!(check_name("name", "séance").is_err());
        assert!(check_name("name", "ab\u{3b1}cd").is_err());
    }

    #[test]
    fn a_project_named_in_a_request_follows_the_documented_pattern() {
        for ok in ["default", "0-PeF401ZWw0", "team.a_1", &"p".repeat(64)] {
            assert!(check_project_name("project", ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "0-PeF401ZWw0*",
            "-team",
            "_team",
            "a b",
            "équipe",
            &"p".repeat(65),
        ] {
            let refused = check_project_name("project", bad).unwrap_err();
            assert_eq!(refused.field, "project", "{bad}");
        }
    }

    #[test]
    fn backend_ai_names_may_hold_hyphens_and_dots_inside() {
        let rule = NameRule::BackendAi;
        for ok in ["pysdk-3fa8bc1d", "my.session_1", "_abc", "a-b-c-d"] {
            assert!(rule.check("name", ok).is_ok(), "{ok}");
        }
        for bad in [
            "-abc",
            "abc.",
            "ab",
            "my session",
            "s\u{e9}ance",
            "a".repeat(65).as_str(),
        ] {
            assert_eq!(rule.check("name", bad).unwrap_err().field, "name", "{bad}");
        }
        assert!(NameRule::Berth.check("name", "pysdk-3fa8bc1d").is_err());
    }

    #[test]
    fn ports_are_1024_to_65535_and_unique() {
        assert_eq!(check_ports(&[1024, 65535]).unwrap(), vec![1024, 65535]);
        assert_eq!(
            check_ports(&[8080, 1023]).unwrap_err().field,
            "preopen_ports[1]"
        );
        assert!(check_ports(&[65536]).is_err());
        assert!(check_ports(&[8080, 8080]).is_err());
        assert!(check_ports(&[]).unwrap().is_empty());
    }

    #[test]
    fn environment_names_must_be_shell_names() {
        let env = |k: &str| BTreeMap::from([(k.to_string(), "v".to_string())]);
        assert!(check_environment(&env("PATH_2")).is_ok());
        assert!(check_environment(&env("_x")).is_ok());
        assert_eq!(
            check_environment(&env("2X")).unwrap_err().field,
            "environment.2X"
        );
        assert!(check_environment(&env("A-B")).is_err());
        for reserved in [
            "NVIDIA_VISIBLE_DEVICES",
            "NVIDIA_DRIVER_CAPABILITIES",
            "nvidia_visible_devices",
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
            "CUDA_MPS_PIPE_DIRECTORY",
            "CUDA_VISIBLE_DEVICES",
            "BERTH_SESSION_ID",
        ] {
            let wrong = check_environment(&env(reserved)).unwrap_err();
            assert_eq!(wrong.field, format!("environment.{reserved}"));
            assert!(wrong.message.contains("set by berth"), "{wrong}");
        }
        assert!(
            check_environment(&env("CUDA_HOME")).is_ok(),
            "not a device or limit"
        );
        assert!(check_environment(&env("NVIDIAX")).is_ok());
        assert!(check_environment(&env("")).is_err());
    }

    #[test]
    fn shared_memory_may_equal_but_not_exceed_memory() {
        let mut s = interactive();
        s.shared_memory_bytes = s.memory_bytes;
        assert!(check_shape(&s).is_ok());
        s.shared_memory_bytes += 1;
        assert_eq!(
            check_shape(&s).unwrap_err().field,
            "resources.shared_memory"
        );
    }

    #[test]
    fn batch_needs_a_command_and_only_batch_takes_time_fields() {
        let mut batch = interactive();
        batch.session_type = SessionType::Batch;
        assert_eq!(check_shape(&batch).unwrap_err().field, "startup_command");
        batch.startup_command = Some("  ".into());
        assert_eq!(check_shape(&batch).unwrap_err().field, "startup_command");
        batch.startup_command = Some("python run.py".into());
        batch.starts_at = Some(Utc::now());
        batch.batch_timeout_secs = Some(2);
        assert!(check_shape(&batch).is_ok());
        batch.batch_timeout_secs = Some(0);
        assert_eq!(check_shape(&batch).unwrap_err().field, "batch_timeout");

        let mut s = interactive();
        s.starts_at = Some(Utc::now());
        assert_eq!(check_shape(&s).unwrap_err().field, "starts_at");
        let mut s = interactive();
        s.batch_timeout_secs = Some(10);
        assert_eq!(check_shape(&s).unwrap_err().field, "batch_timeout");
    }

    #[test]
    fn omp_threads_default_to_the_cpu_count() {
        assert_eq!(check_shape(&interactive()), Ok(2));
        let mut s = interactive();
        s.cpu_milli = 1500;
        assert_eq!(check_shape(&s), Ok(2), "fractions round up");
        s.omp_num_threads = Some(7);
        assert_eq!(check_shape(&s), Ok(7));
        s.omp_num_threads = Some(0);
        assert!(check_shape(&s).is_err());
    }

    #[test]
    fn resources_and_cluster_size_have_bounds() {
        let mut s = interactive();
        s.cpu_milli = 0;
        assert_eq!(check_shape(&s).unwrap_err().field, "resources.cpu");
        let mut s = interactive();
        s.memory_bytes = 0;
        s.shared_memory_bytes = 0;
        assert_eq!(check_shape(&s).unwrap_err().field, "resources.memory");
        let mut s = interactive();
        s.cluster_size = 0;
        assert_eq!(check_shape(&s).unwrap_err().field, "cluster_size");
        s.cluster_size = MAX_CLUSTER_SIZE + 1;
        assert!(check_shape(&s).is_err());
        s.cluster_size = MAX_CLUSTER_SIZE;
        s.cluster_mode = ClusterMode::MultiNode;
        assert!(check_shape(&s).is_ok());
    }

    #[test]
    fn folder_names_cannot_leave_their_directory() {
        assert!(check_folder_name("name", "data1").is_ok());
        assert!(check_folder_name("name", "my.data_2-x").is_ok());
        for bad in [
            "",
            "..",
            "../etc",
            ".hidden",
            "a/b",
            "/abs",
            &"a".repeat(65),
            "séance",
        ] {
            assert_eq!(
                check_folder_name("name", bad).unwrap_err().field,
                "name",
                "{bad}"
            );
        }
    }

    #[test]
    fn random_names_are_always_valid() {
        let mut rng = rand::rng();
        for _ in 0..1000 {
            let name = random_name(&mut rng);
            assert!(check_name("name", &name).is_ok(), "{name}");
        }
    }
}
