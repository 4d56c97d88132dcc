//! The CLI's profiles file (`~/.config/berth/profiles.toml`, or `BERTH_PROFILES_FILE`):
//! `[NAME]` tables with `gateway` and `api_key`, which give the gateway and the key where
//! neither a flag nor a variable does; `[default]` is used when no profile is named.

use std::path::PathBuf;

use super::settings::gateway_url;
use super::ConfigError;

/// One table of the profiles file.
#[derive(Debug, Default, serde::Deserialize)]
pub(super) struct Profile {
    pub gateway: Option<String>,
    pub api_key: Option<String>,
}

/// The profiles file: the one named, else under `XDG_CONFIG_HOME` (or `~/.config`).
fn profiles_file(named: Option<&PathBuf>) -> Option<PathBuf> {
    named.cloned().or_else(|| {
        let config = std::env::var_os("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".config")))?;
        Some(config.join("berth").join("profiles.toml"))
    })
}

/// The profile `name` (`default` when none is named) of the file `file` names. No file, or
/// no `[default]` in it, is an empty profile; a profile asked for by name must be there.
pub(super) fn read(file: Option<&PathBuf>, name: Option<&str>) -> Result<Profile, ConfigError> {
    let Some(path) = profiles_file(file) else {
        return Ok(Profile::default());
    };
    let failed = |reason: String| ConfigError::Profiles {
        path: path.display().to_string(),
        reason,
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        // No file is no profile, unless one was asked for by name.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && name.is_none() => {
            return Ok(Profile::default())
        }
        Err(e) => return Err(failed(e.to_string())),
    };
    let mut profiles: std::collections::BTreeMap<String, Profile> =
        toml::from_str(&text).map_err(|e| failed(e.to_string()))?;
    let wanted = name.unwrap_or("default");
    match profiles.remove(wanted) {
        Some(profile) => {
            if let Some(gateway) = &profile.gateway {
                gateway_url(gateway).map_err(|e| failed(format!("[{wanted}] gateway: {e}")))?;
            }
            Ok(profile)
        }
        None if name.is_none() => Ok(Profile::default()),
        None => Err(failed(format!("no profile [{wanted}]"))),
    }
}

#[cfg(test)]
mod tests {
    use super::super::with;

    #[test]
    fn a_profile_gives_the_gateway_and_key_that_no_flag_or_variable_gives() {
        let dir = std::env::temp_dir().join(format!("berth-profiles-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("profiles.toml");
        std::fs::write(
            &file,
            "[default]\ngateway = \"https://lab.example:8480/\"\napi_key = \"bk_default\"\n\n[other]\ngateway = \"http://other:8480\"\n",
        )
        .unwrap();
        let file_text = file.display().to_string();
        let config = with(&[("BERTH_PROFILES_FILE", &file_text)]).unwrap();
        assert_eq!(config.gateway_url, "https://lab.example:8480");
        assert_eq!(config.api_key.as_deref(), Some("bk_default"));
        let config = with(&[
            ("BERTH_PROFILES_FILE", &file_text),
            ("BERTH_PROFILE", "other"),
            ("BERTH_API_KEY", "bk_env"),
        ])
        .unwrap();
        assert_eq!(config.gateway_url, "http://other:8480");
        assert_eq!(
            config.api_key.as_deref(),
            Some("bk_env"),
            "a variable wins over the profile"
        );
        let missing = with(&[
            ("BERTH_PROFILES_FILE", &file_text),
            ("BERTH_PROFILE", "nope"),
        ]);
        assert!(missing
            .unwrap_err()
            .to_string()
            .contains("no profile [nope]"));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
