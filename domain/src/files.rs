//! Paths inside a folder, as the files API takes them: relative, `/`-separated, and never
//! leaving the folder. Pure: what a path may say is decided here; that no link on disk leads
//! out of the folder is checked where the files are (the gateway's `files`).

/// A path inside a folder: its components, none empty, `.` or `..`. No components: the
/// folder itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FolderPath(Vec<String>);

/// Why a path is refused, in words that name what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("an absolute path (`/...`) is refused: paths are inside the folder")]
    Absolute,
    #[error("`..` is refused: paths stay inside the folder")]
    Parent,
    #[error("an empty component (`//`) or `.` is refused")]
    Empty,
    #[error("a NUL byte is refused")]
    Nul,
    #[error("at most 4096 characters in all and 255 per component")]
    TooLong,
}

/// The most characters of a whole path, and of one of its components (Linux's limits, which
/// count bytes: a longer name in bytes is refused by the file system, and said so).
const MOST_PATH: usize = 4096;
const MOST_COMPONENT: usize = 255;

impl FolderPath {
    /// The folder itself.
    pub fn root() -> FolderPath {
        FolderPath(Vec::new())
    }

    /// `path` as a path inside a folder: `""` (or `.`) is the folder itself; a trailing `/`
    /// is allowed; `/...`, `..`, `//`, `.` inside and NUL are refused.
    pub fn parse(path: &str) -> Result<FolderPath, PathError> {
        if path.chars().count() > MOST_PATH {
            return Err(PathError::TooLong);
        }
        if path.contains('\0') {
            return Err(PathError::Nul);
        }
        if path.starts_with('/') {
            return Err(PathError::Absolute);
        }
        let path = path.strip_suffix('/').unwrap_or(path);
        if path.is_empty() || path == "." {
            return Ok(FolderPath::root());
        }
        let mut components = Vec::new();
        for component in path.split('/') {
            match component {
                ".." => return Err(PathError::Parent),
                "" | "." => return Err(PathError::Empty),
                c if c.chars().count() > MOST_COMPONENT => return Err(PathError::TooLong),
                c => components.push(c.to_owned()),
            }
        }
        Ok(FolderPath(components))
    }

    pub fn components(&self) -> &[String] {
        &self.0
    }

    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }

    /// Its last component (the folder itself has none).
    pub fn file_name(&self) -> Option<&str> {
        self.0.last().map(String::as_str)
    }

    /// The path that holds it (the folder itself for a top-level entry; none for the root).
    pub fn parent(&self) -> Option<FolderPath> {
        (!self.0.is_empty()).then(|| FolderPath(self.0[..self.0.len() - 1].to_vec()))
    }

    /// `/`-separated, as the API shows it (`""` for the folder itself).
    pub fn display(&self) -> String {
        self.0.join("/")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_is_relative_and_stays_inside_the_folder() {
        assert_eq!(FolderPath::parse("").unwrap(), FolderPath::root());
        assert_eq!(FolderPath::parse(".").unwrap(), FolderPath::root());
        let p = FolderPath::parse("data/run 1/out.csv").unwrap();
        assert_eq!(p.components(), ["data", "run 1", "out.csv"]);
        assert_eq!(p.file_name(), Some("out.csv"));
        assert_eq!(p.parent().unwrap().display(), "data/run 1");
        assert_eq!(FolderPath::parse("dir/").unwrap().display(), "dir");
        assert_eq!(FolderPath::parse("..hidden").unwrap().display(), "..hidden");
        for (bad, why) in [
            ("/etc/passwd", PathError::Absolute),
            ("../other", PathError::Parent),
            ("a/../../b", PathError::Parent),
            ("a//b", PathError::Empty),
            ("a/./b", PathError::Empty),
            ("a\0b", PathError::Nul),
        ] {
            assert_eq!(FolderPath::parse(bad), Err(why), "{bad:?}");
        }
        assert_eq!(FolderPath::parse(&"x".repeat(256)), Err(PathError::TooLong));
        assert_eq!(
            FolderPath::parse(&"x/".repeat(2049)),
            Err(PathError::TooLong)
        );
    }
}
