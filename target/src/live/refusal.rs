//! Why a change was refused, typed: the admin socket carries the kind beside the
//! message, the management API maps it to a gRPC status code (see the .proto).

use std::fmt;

use serde::{Deserialize, Serialize};

/// The kind of a [`Refusal`] (one per gRPC status code the API returns for it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RefusalKind {
    /// A malformed or out-of-range field; the message starts with its name.
    InvalidArgument,
    /// The named subsystem, namespace, port or host does not exist.
    NotFound,
    /// What the change would create exists.
    AlreadyExists,
    /// The change cannot be applied as asked (a backing path that cannot be
    /// opened, an address in use, a setting that needs a restart).
    FailedPrecondition,
    /// The configuration file was edited since the target read it.
    Aborted,
    /// The change could not be saved (the running state is unchanged).
    Unavailable,
}

/// A refused change: nothing was applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub kind: RefusalKind,
    /// For [`RefusalKind::InvalidArgument`]: the field (or configuration key path).
    pub field: Option<String>,
    pub message: String,
}

impl Refusal {
    pub fn new(kind: RefusalKind, message: impl Into<String>) -> Refusal {
        Refusal {
            kind,
            field: None,
            message: message.into(),
        }
    }

    /// `field` is malformed or out of range; the message is `FIELD: WHY`.
    pub fn invalid(field: &str, why: impl fmt::Display) -> Refusal {
        Refusal {
            kind: RefusalKind::InvalidArgument,
            field: Some(field.to_string()),
            message: format!("{field}: {why}"),
        }
    }

    pub fn not_found(message: impl Into<String>) -> Refusal {
        Refusal::new(RefusalKind::NotFound, message)
    }

    pub fn exists(message: impl Into<String>) -> Refusal {
        Refusal::new(RefusalKind::AlreadyExists, message)
    }
}

/// The planner's and the listeners' reasons: the change cannot be applied as asked.
impl From<String> for Refusal {
    fn from(message: String) -> Refusal {
        Refusal::new(RefusalKind::FailedPrecondition, message)
    }
}

impl From<&str> for Refusal {
    fn from(message: &str) -> Refusal {
        Refusal::from(message.to_string())
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Refusal {}
