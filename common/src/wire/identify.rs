//! Identify data structures (4096 bytes each): Identify Controller (Linux
//! `struct nvme_id_ctrl`), Identify Namespace (`struct nvme_id_ns`), the NVM command
//! set specific controller / namespace structures (`struct nvme_id_ctrl_nvm`,
//! `struct nvme_id_ns_nvm`), the I/O command set independent namespace structure
//! (`struct nvme_id_ns_cs_indep`), namespace ID lists and namespace identification
//! descriptors.
//!
//! One file per structure family; everything is re-exported here, so every item keeps
//! its `wire::identify::` path: `controller` (Identify Controller and its field
//! values), `power_state` (power state descriptors), `namespace` (Identify Namespace,
//! LBA formats and its field values), `command_set` (the command set specific and
//! independent structures), `lists` (namespace ID lists and identification
//! descriptors).

use super::set_padded;

mod command_set;
mod controller;
mod lists;
mod namespace;
mod power_state;
#[cfg(test)]
mod tests;

pub use command_set::*;
pub use controller::*;
pub use lists::*;
pub use namespace::*;
pub use power_state::*;

/// The length of every Identify data structure.
pub const IDENTIFY_LEN: usize = 4096;

/// Copies `s` as ASCII into a space-padded field: bytes outside printable ASCII
/// become `?`, the string is truncated to the field.
pub(super) fn set_ascii_padded(buf: &mut [u8], r: core::ops::Range<usize>, s: &str) {
    let ascii: Vec<u8> = s
        .bytes()
        .map(|b| if (0x20..=0x7E).contains(&b) { b } else { b'?' })
        .take(r.len())
        .collect();
    set_padded(buf, r, &ascii, b' ')
}

/// Copies `s` into a NUL-padded field, keeping at least one NUL.
pub(super) fn set_nul_padded(buf: &mut [u8], r: core::ops::Range<usize>, s: &str) {
    let b = s.as_bytes();
    let n = b.len().min(r.len().saturating_sub(1));
    set_padded(buf, r, &b[..n], 0)
}
