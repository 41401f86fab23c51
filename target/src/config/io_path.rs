//! `io_path` of a namespace: how its I/O reaches an NVMe namespace's block device.

use serde::{Deserialize, Serialize};

/// [`super::NamespaceConfig::io_path`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IoPath {
    #[default]
    Block,
    Passthru,
}

impl IoPath {
    pub fn is_block(&self) -> bool {
        *self == IoPath::Block
    }
}
