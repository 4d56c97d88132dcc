//! `berth bench ...`: runs the benchmarks' own binary, `berth-bench`, in this process's place.
//!
//! The benchmarks are a crate of their own (`bench/`), so that what only they and the tests
//! need (scratch clusters, a certificate authority) is not linked into the `berth` that
//! operators run. `berth bench` keeps the commands docs/performance.md names working: it
//! looks for `berth-bench` beside this binary (cargo builds both into the same `target/`
//! directory), then on the `PATH`, and runs it with the same arguments and environment.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::parser::ValueSource;
use clap::Args as _;

/// The benchmarks' binary.
const PROGRAM: &str = "berth-bench";

/// The one command that builds it.
const BUILD: &str = "cargo build --release -p berth-bench";

/// Replaces this process with `berth-bench`, given the settings this command line set
/// (they may come before `bench`) and then `args`; it reads the `BERTH_*` variables itself.
/// Returns only when that cannot be done.
pub fn pass_through(matches: &clap::ArgMatches, args: Vec<OsString>) -> ExitCode {
    let Some(program) = find() else {
        eprintln!(
            "berth bench: the benchmarks are a binary of their own, `{PROGRAM}`, found neither \
             beside this `berth` nor on the PATH; build it with `{BUILD}`"
        );
        return ExitCode::FAILURE;
    };
    let mut forwarded = settings_given(matches);
    forwarded.extend(args);
    let error = std::os::unix::process::CommandExt::exec(
        std::process::Command::new(&program).args(forwarded),
    );
    eprintln!("berth bench: run {}: {error}", program.display());
    ExitCode::FAILURE
}

/// `berth-bench` beside the running `berth`, else the first on the `PATH`.
fn find() -> Option<PathBuf> {
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.join(PROGRAM)))
        .filter(|path| path.is_file());
    beside.or_else(|| {
        let path = std::env::var_os("PATH")?;
        std::env::split_paths(&path)
            .map(|dir| dir.join(PROGRAM))
            .find(|path| path.is_file())
    })
}

/// The settings given as flags on this command line, as `--flag=value`: clap takes them
/// wherever they stand (they are global), and the arguments after `bench` hold only those
/// given after the bench's name.
fn settings_given(matches: &clap::ArgMatches) -> Vec<OsString> {
    let matches = matches.subcommand_matches("bench").unwrap_or(matches);
    let settings = berth::config::Settings::augment_args(clap::Command::new("settings"));
    let mut given = Vec::new();
    for arg in settings.get_arguments() {
        let (id, Some(long)) = (arg.get_id().as_str(), arg.get_long()) else {
            continue;
        };
        if matches.value_source(id) != Some(ValueSource::CommandLine) {
            continue;
        }
        for value in matches.get_raw(id).into_iter().flatten() {
            let mut flag = OsString::from(format!("--{long}="));
            flag.push(value);
            given.push(flag);
        }
    }
    given
}
