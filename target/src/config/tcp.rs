//! `tcp:`: tuning of the NVMe/TCP transport (every field optional).
//!
//! The digests are what the target *allows*: a host still chooses per connection in its
//! ICReq. MAXH2CDATA and the C2HData chunk bound the per-connection buffers together with
//! the queue size; the arena is allocated once per poll group.

use serde::{Deserialize, Serialize};

/// NVMe/TCP tuning (`tcp:`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TcpConfig {
    /// Enable header digests (CRC32C) when a host asks for them.
    pub header_digest: bool,
    /// Enable data digests (CRC32C) when a host asks for them.
    pub data_digest: bool,
    /// MAXH2CDATA: the most data one H2CData PDU (and one R2T) carries; a multiple of 4,
    /// 4 KiB to 16 MiB.
    pub maxh2cdata: u32,
    /// R2Ts outstanding per command at most (the host's MAXR2T + 1 applies first): 1..=256.
    pub max_r2t_per_command: u32,
    /// The most data one C2HData PDU carries (longer reads go in chunks): 4 KiB to 16 MiB.
    pub c2h_chunk: u32,
    /// A connection with work outstanding that makes no progress for this long (ms) is
    /// closed: 1000 or more.
    pub stall_timeout_ms: u64,
    /// Bytes of the data buffer arena of each poll group: 1 MiB to 16 GiB.
    pub arena_bytes: u64,
    /// A TLS handshake (on a `tsas: tls1.3` port) not finished within this long (ms)
    /// closes its connection: 100 ms to 10 minutes.
    pub tls_handshake_timeout_ms: u64,
    /// After a TLS handshake, hand the keys to the kernel (kernel TLS) where it has
    /// the `tls` module, so records are sealed and opened there; false keeps them in
    /// user space (OpenSSL).
    pub ktls: bool,
}

/// Smallest MAXH2CDATA and C2HData chunk.
pub const TCP_MIN_PDU_DATA: u32 = 4 * 1024;
/// Largest MAXH2CDATA and C2HData chunk (the framer's PDU limit).
pub const TCP_MAX_PDU_DATA: u32 = 16 * 1024 * 1024;
/// Bounds of `max_r2t_per_command`.
pub const TCP_MAX_R2T_RANGE: (u32, u32) = (1, 256);
/// Smallest stall timeout (ms).
pub const TCP_MIN_STALL_MS: u64 = 1000;
/// Bounds of `arena_bytes`.
pub const TCP_ARENA_RANGE: (u64, u64) = (1 << 20, 16 << 30);
/// Bounds of `tls_handshake_timeout_ms`.
pub const TCP_TLS_HANDSHAKE_RANGE: (u64, u64) = (100, 600_000);

impl Default for TcpConfig {
    /// Digests allowed, 128 KiB H2CData and C2HData PDUs (SPDK's default I/O unit),
    /// up to 16 R2Ts per command, 30 s stall timeout, a 64 MiB arena per poll group,
    /// 10 s for a TLS handshake (the Linux host's `tls_handshake_timeout`).
    fn default() -> Self {
        TcpConfig {
            header_digest: true,
            data_digest: true,
            maxh2cdata: 128 * 1024,
            max_r2t_per_command: 16,
            c2h_chunk: 128 * 1024,
            stall_timeout_ms: 30_000,
            arena_bytes: 64 << 20,
            tls_handshake_timeout_ms: 10_000,
            ktls: true,
        }
    }
}
