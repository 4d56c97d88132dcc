//! Reading a command line and the `BERTH_*` variables into [`Settings`], under the rules that
//! the process, the tests and the benchmarks share: a flag wins over its variable; an empty
//! variable counts as unset; a value that does not parse is refused, naming its variable and
//! value where it came from one (clap names only the flag).

use std::ffi::OsString;

use clap::{Args, FromArgMatches};

use super::{Config, ConfigError, Settings};

/// Where the `BERTH_*` variables are read from.
#[derive(Clone, Copy)]
pub enum Variables<'a> {
    /// The process's environment, which clap reads (so `--help` shows what is set).
    Process,
    /// A variable's value by name (tests and benchmarks); the process's environment plays
    /// no part.
    Given(&'a dyn Fn(&str) -> Option<String>),
}

impl Variables<'_> {
    /// A variable's value; an empty one counts as unset.
    fn get(&self, name: &str) -> Option<String> {
        let value = match self {
            Variables::Process => std::env::var_os(name).map(|v| v.to_string_lossy().into_owned()),
            Variables::Given(source) => source(name),
        };
        value.filter(|v| !v.is_empty())
    }
}

/// A command line read with its settings.
#[derive(Debug)]
pub struct Loaded<C> {
    /// What the command line says, as `C` (berth's command, or [`Settings`] alone).
    pub parsed: C,
    pub settings: Settings,
    matches: clap::ArgMatches,
    /// The settings a [`Variables::Given`] variable gave (passed to clap as flags).
    given: Vec<clap::Id>,
}

/// Reads `args` (the program's name first) against `command`, which flattens [`Settings`],
/// with `variables`. Help, the version and a command line that does not parse come back as
/// [`ConfigError::Command`], to print or exit with as clap does.
pub fn load<C: FromArgMatches>(
    command: clap::Command,
    args: impl IntoIterator<Item = OsString>,
    variables: Variables<'_>,
) -> Result<Loaded<C>, ConfigError> {
    let args: Vec<OsString> = args.into_iter().collect();
    let on_the_command_line = |long: &str| {
        args.iter().skip(1).any(|arg| {
            let arg = arg.to_string_lossy();
            arg == format!("--{long}") || arg.starts_with(&format!("--{long}="))
        })
    };
    // Each setting's flag and variable, from the top level, where every setting is.
    let settings: Vec<(clap::Id, String, String)> = command
        .get_arguments()
        .filter_map(|arg| {
            let env = arg.get_env()?.to_string_lossy().into_owned();
            Some((arg.get_id().clone(), arg.get_long()?.to_owned(), env))
        })
        .collect();
    let mut argv = args.clone();
    let mut given = Vec::new();
    let command = match variables {
        // An empty variable is unset: clap must not see it.
        Variables::Process => every_arg(command, &|arg| {
            let empty = arg
                .get_env()
                .and_then(std::env::var_os)
                .is_some_and(|value| value.is_empty());
            if empty {
                arg.env(None::<&str>)
            } else {
                arg
            }
        }),
        // The variables reach clap as flags, before the command's name (the settings are
        // global), unless the command line gives that flag itself.
        Variables::Given(_) => {
            for (id, long, env) in &settings {
                if let Some(value) = variables.get(env).filter(|_| !on_the_command_line(long)) {
                    argv.insert(1.min(argv.len()), format!("--{long}={value}").into());
                    given.push(id.clone());
                }
            }
            every_arg(command, &|arg| arg.env(None::<&str>))
        }
    };
    // Which variable and value stand behind a flag whose value does not parse.
    let behind = |long: &str| {
        if on_the_command_line(long) {
            return None;
        }
        let (_, _, env) = settings.iter().find(|(_, l, _)| l == long)?;
        Some((env.clone(), variables.get(env)?))
    };
    let refused = |error: clap::Error| ConfigError::from_clap(error, &behind);
    let matches = command.try_get_matches_from(argv).map_err(refused)?;
    Ok(Loaded {
        parsed: C::from_arg_matches(&matches).map_err(refused)?,
        settings: Settings::from_arg_matches(&matches).map_err(refused)?,
        matches,
        given,
    })
}

/// `command` with `f` applied to every argument of it and of its subcommands, all the way
/// down: a setting is also copied into the subcommands that show it in their `--help`.
fn every_arg(command: clap::Command, f: &dyn Fn(clap::Arg) -> clap::Arg) -> clap::Command {
    let names: Vec<String> = command
        .get_subcommands()
        .map(|sub| sub.get_name().to_owned())
        .collect();
    let mut command = command.mut_args(f);
    for name in names {
        command = command.mut_subcommand(name, |sub| every_arg(sub, f));
    }
    command
}

impl<C> Loaded<C> {
    /// The configuration the settings describe (the CLI's profile read where needed).
    pub fn config(&self) -> Result<Config, ConfigError> {
        Config::from_settings(&self.settings)
    }

    /// The command line as clap read it (`berth bench` forwards the settings it holds).
    pub fn matches(&self) -> &clap::ArgMatches {
        &self.matches
    }

    /// Each setting's variable, its value as `berth config` shows it (secrets masked) and
    /// where it came from, in declaration order.
    pub fn listing(&self) -> Vec<(String, String, &'static str)> {
        let command = Settings::augment_args(clap::Command::new("berth"));
        command
            .get_arguments()
            .filter_map(|arg| {
                let env = arg.get_env()?.to_string_lossy().into_owned();
                let id = arg.get_id();
                let value = self
                    .matches
                    .get_raw(id.as_str())
                    .and_then(|mut values| values.next())
                    .map(|v| v.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let source = match self.matches.value_source(id.as_str()) {
                    _ if self.given.contains(id) => "environment",
                    Some(clap::parser::ValueSource::CommandLine) => "flag",
                    Some(clap::parser::ValueSource::EnvVariable) => "environment",
                    Some(clap::parser::ValueSource::DefaultValue) => "default",
                    _ => "unset",
                };
                let shown = if arg.is_hide_env_values_set() {
                    super::mask(&value)
                } else {
                    value
                };
                Some((env, shown, source))
            })
            .collect()
    }
}

impl ConfigError {
    /// clap's error, with the variable named where a bad value came from one: `behind(long)`
    /// says which variable and value stand behind a flag.
    fn from_clap(
        error: clap::Error,
        behind: &dyn Fn(&str) -> Option<(String, String)>,
    ) -> ConfigError {
        use clap::error::{ContextKind, ContextValue, ErrorKind};
        if !matches!(
            error.kind(),
            ErrorKind::ValueValidation | ErrorKind::InvalidValue
        ) {
            return ConfigError::Command(error);
        }
        let arg = match error.get(ContextKind::InvalidArg) {
            Some(ContextValue::String(arg)) => arg.clone(),
            _ => return ConfigError::Command(error),
        };
        let long = arg
            .trim_start_matches("--")
            .split([' ', '='])
            .next()
            .unwrap_or_default()
            .to_owned();
        let reason = error
            .to_string()
            .lines()
            .next()
            .unwrap_or_default()
            .trim_start_matches("error: ")
            .to_owned();
        match behind(&long) {
            Some((variable, value)) => ConfigError::BadValue {
                variable,
                value,
                reason,
            },
            None => ConfigError::Command(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::{with, LogFormat, Timings, DEFAULT_DATABASE_URL, DEFAULT_PROXY_IDLE};
    use super::super::{MasterKey, DEFAULT_MASTER_KEY_FILE};
    use super::*;
    use events::relay::Topology;

    #[test]
    fn defaults_match_the_local_services_and_variables_override_them() {
        let config = Config::defaults();
        assert_eq!(config.database_url, DEFAULT_DATABASE_URL);
        assert_eq!(config.gateway_url, "http://127.0.0.1:8480");
        assert_eq!(config.timings, Timings::default());
        assert_eq!(config.topology, Topology::default());
        assert_eq!(config.agent_bus, bus::Subjects::default());
        assert_eq!(config.proxy_idle, Some(DEFAULT_PROXY_IDLE));
        assert!(config.metrics, "metrics are on by default");
        assert_eq!(config.metrics_listen, None);
        assert_eq!(config.log_format, LogFormat::Text);
        assert_eq!(config.proxy_ports, Some((10200, 10299)));
        assert_eq!(config.create_queue, gateway::DEFAULT_CREATE_QUEUE);
        assert_eq!(config.mock_gpus, None, "the GPUs are NVML's by default");
        assert_eq!(config.gpu_shares_per_device, 1000);
        assert_eq!(config.gpu_mps_pipe_dir, None);
        assert_eq!(
            config.webhook_policy,
            Default::default(),
            "webhooks reach no special range unless the operator admits it"
        );
        assert_eq!(
            config.backendai,
            Some(MasterKey::File(DEFAULT_MASTER_KEY_FILE.into())),
            "Backend.AI's API is on, its key in a file"
        );

        let config = with(&[
            ("BERTH_GATEWAY_LISTEN", "0.0.0.0:9000"),
            ("BERTH_SCHEDULER_INTERVAL_MS", "250"),
            ("BERTH_HEARTBEAT_TIMEOUT_SECS", "7"),
            ("BERTH_AGENT_DEPARTED_TIMEOUT_SECS", "90"),
            ("BERTH_NATS_STREAM", "T_1"),
            ("BERTH_API_KEY", ""),
            ("BERTH_PROXY_IDLE_SECS", "0"),
            ("BERTH_PROXY_PORTS", "off"),
            ("BERTH_APPS_DOMAIN", "Apps.Example.COM."),
            ("BERTH_SERVE_DOMAIN", "Models.Example.COM"),
            ("BERTH_METRICS", "off"),
            ("BERTH_METRICS_LISTEN", "127.0.0.1:9480"),
            ("BERTH_LOG_FORMAT", "json"),
            ("BERTH_MOCK_GPUS", "2"),
            ("BERTH_MOCK_GPU_MEMORY_GIB", "16"),
            ("BERTH_MOCK_GPU_MODEL", "Mock A100"),
            ("BERTH_MOCK_GPU_USAGE", "/tmp/gpu-use.json"),
            ("BERTH_GPU_SHARES_PER_DEVICE", "5"),
            ("BERTH_GPU_MPS_PIPE_DIR", "/tmp/nvidia-mps"),
            ("BERTH_WEBHOOK_ALLOW", "127.0.0.1/32, fd00::/8"),
        ])
        .unwrap();
        let allowed: Vec<String> = config
            .webhook_policy
            .allow
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(allowed, ["127.0.0.1/32", "fd00::/8"]);
        assert_eq!(
            config.mock_gpus,
            Some(agent::gpu::MockGpus {
                count: 2,
                memory_bytes: 16 << 30,
                model: "Mock A100".into(),
                usage_file: Some("/tmp/gpu-use.json".into()),
            })
        );
        assert_eq!(config.gpu_shares_per_device, 5);
        assert_eq!(
            config.gpu_mps_pipe_dir.as_deref(),
            Some(std::path::Path::new("/tmp/nvidia-mps"))
        );
        assert_eq!(config.gateway_url, "http://0.0.0.0:9000");
        assert_eq!(
            config.timings.scheduler_interval,
            Duration::from_millis(250)
        );
        assert_eq!(config.timings.heartbeat_timeout, Duration::from_secs(7));
        assert_eq!(
            config.timings.agent_departed_timeout,
            Duration::from_secs(90)
        );
        assert_eq!(config.topology.stream, "T_1");
        assert_eq!(config.api_key, None, "an empty variable is unset");
        assert_eq!(config.proxy_idle, None, "0: circuits never idle out");
        assert_eq!(config.proxy_ports, None);
        assert_eq!(config.apps_domain.as_deref(), Some("apps.example.com"));
        assert_eq!(config.serve_domain.as_deref(), Some("models.example.com"));
        assert!(!config.metrics);
        assert_eq!(config.metrics_listen.as_deref(), Some("127.0.0.1:9480"));
        assert_eq!(config.log_format, LogFormat::Json);
    }

    #[test]
    fn a_value_that_does_not_parse_is_refused_naming_its_variable_and_value() {
        for (variable, value) in [
            ("BERTH_PROXY_PORTS", "10200:10299"),
            ("BERTH_PROXY_PORTS", "0-10"),
            ("BERTH_APPS_DOMAIN", "localhost"),
            ("BERTH_APPS_DOMAIN", "*.apps.example.com"),
            ("BERTH_HEARTBEAT_TIMEOUT_SECS", "30s"),
            ("BERTH_SCHEDULER_INTERVAL_MS", "-1"),
            ("BERTH_PROXY_ADDRESS", "proxy.example"),
            ("BERTH_AGENT_ADDRESS", "10.0.0"),
            ("BERTH_GATEWAY_LISTEN", "localhost"),
            ("BERTH_GATEWAY_URL", "ftp://gateway"),
            ("BERTH_CREATE_QUEUE", "0"),
            ("BERTH_FIRST_API_KEY", "secret"),
            ("BERTH_METRICS", "maybe"),
            ("BERTH_METRICS_LISTEN", "9480"),
            ("BERTH_LOG_FORMAT", "xml"),
            ("BERTH_MOCK_GPUS", "-1"),
            ("BERTH_MOCK_GPU_MEMORY_GIB", "0"),
            ("BERTH_GPU_SHARES_PER_DEVICE", "0"),
            ("BERTH_GPU_SHARES_PER_DEVICE", "1001"),
            ("BERTH_WEBHOOK_ALLOW", "10.0.0.0/33"),
            ("BERTH_WEBHOOK_ALLOW", "intranet.example"),
        ] {
            let error = with(&[(variable, value)]).expect_err(variable).to_string();
            assert!(
                error.starts_with(&format!("{variable}={value}: ")),
                "{variable}={value} gave {error}"
            );
        }
    }

    #[test]
    fn a_flag_wins_over_its_variable_and_says_so() {
        let source = |name: &str| (name == "BERTH_HEARTBEAT_TIMEOUT_SECS").then(|| "45".to_owned());
        let loaded: Loaded<Settings> = load(
            Settings::augment_args(clap::Command::new("berth")),
            ["berth", "--api-key", "bk_flag"].map(OsString::from),
            Variables::Given(&source),
        )
        .unwrap();
        let config = loaded.config().unwrap();
        assert_eq!(config.api_key.as_deref(), Some("bk_flag"));
        assert_eq!(config.timings.heartbeat_timeout, Duration::from_secs(45));
        let listing = loaded.listing();
        let source_of = |variable: &str| listing.iter().find(|(v, ..)| v == variable).unwrap().2;
        assert_eq!(source_of("BERTH_API_KEY"), "flag");
        assert_eq!(source_of("BERTH_HEARTBEAT_TIMEOUT_SECS"), "environment");
        assert_eq!(source_of("BERTH_DATABASE_URL"), "default");
    }
}
