//! [`ConfigError`]: where in which file a configuration went wrong, and why.

use std::fmt;

/// What kind of problem a [`ConfigError`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigErrorKind {
    /// The file could not be read (or the effective config could not be printed).
    Io,
    /// The text is not YAML, or does not have the configuration's shape: a syntax error,
    /// an unknown or missing key, a value of the wrong type.
    Parse,
    /// The configuration has the right shape but breaks a rule (duplicate nsid, unknown
    /// subsystem, a limit out of range, ...).
    Invalid,
}

/// A configuration error, displayed as `origin:line:column: key.path: message`, e.g.
///
/// ```text
/// configs/x.yaml:12:7: subsystems[0].namespaces[1].nsid: invalid type: string "a", expected u32
/// ```
///
/// `line`/`column` (1-based) are left out when unknown, and so is the key path when the
/// error is not about one key (a YAML syntax error, an unreadable file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub kind: ConfigErrorKind,
    /// The file (or `<command line>`, or the origin given to `from_yaml_str`).
    pub origin: String,
    /// 1-based line of the offending key or value, when known.
    pub line: Option<usize>,
    /// 1-based column of the offending key or value, when known.
    pub column: Option<usize>,
    /// Key path such as `subsystems[0].namespaces[1].nsid`; empty when not about a key.
    pub path: String,
    /// What is wrong, without the location.
    pub message: String,
}

impl ConfigError {
    pub(crate) fn new(
        kind: ConfigErrorKind,
        origin: &str,
        location: Option<(usize, usize)>,
        path: String,
        message: String,
    ) -> Self {
        ConfigError {
            kind,
            origin: origin.to_string(),
            line: location.map(|(l, _)| l),
            column: location.map(|(_, c)| c),
            path,
            message,
        }
    }
}

impl std::error::Error for ConfigError {}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.origin)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
            if let Some(column) = self.column {
                write!(f, ":{column}")?;
            }
        }
        f.write_str(": ")?;
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        f.write_str(&self.message)
    }
}

/// One step of a key path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Seg {
    Key(String),
    Index(usize),
}

/// A key path into the configuration: `subsystems[0].namespaces[1].nsid`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct KeyPath(pub(crate) Vec<Seg>);

impl KeyPath {
    pub(crate) fn root() -> Self {
        KeyPath(Vec::new())
    }

    pub(crate) fn key(&self, key: &str) -> Self {
        let mut segs = self.0.clone();
        segs.push(Seg::Key(key.to_string()));
        KeyPath(segs)
    }

    pub(crate) fn index(&self, index: usize) -> Self {
        let mut segs = self.0.clone();
        segs.push(Seg::Index(index));
        KeyPath(segs)
    }

    pub(crate) fn segs(&self) -> &[Seg] {
        &self.0
    }
}

impl fmt::Display for KeyPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for seg in &self.0 {
            match seg {
                Seg::Key(k) => {
                    if !first {
                        f.write_str(".")?;
                    }
                    f.write_str(k)?;
                }
                Seg::Index(i) => write!(f, "[{i}]")?,
            }
            first = false;
        }
        Ok(())
    }
}
