//! [`ConnectOptions`]: what to connect to and how, with Linux's defaults.

use std::time::Duration;

use nvmf_common::auth::HostKeys;
use nvmf_common::types::Nqn;

use crate::error::Error;

/// Default I/O queue entries (Linux `NVMF_DEF_QUEUE_SIZE`).
pub const DEFAULT_QUEUE_SIZE: u16 = 128;
/// Default admin queue entries (Linux `NVME_AQ_DEPTH`).
pub const DEFAULT_ADMIN_QUEUE_SIZE: u16 = 32;
/// Default keep-alive timeout for I/O controllers (Linux `NVME_DEFAULT_KATO`, 5 s).
pub const DEFAULT_KATO_MS: u32 = 5_000;
/// Default per-command timeout (Linux `NVME_IO_TIMEOUT`, 30 s).
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(30);
/// Default age at which an outstanding command is reported as a stuck command: a third
/// of the default command timeout, so a command the target never answers shows in the
/// log well before it times out.
pub const DEFAULT_STUCK_COMMAND_WARN: Duration = Duration::from_secs(10);
/// Default transport connect timeout.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The smallest usable queue: one command outstanding needs two entries.
pub const MIN_QUEUE_SIZE: u16 = 2;

/// What to connect to and how.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    pub subnqn: Nqn,
    pub hostnqn: Nqn,
    pub hostid: [u8; 16],
    /// I/O queues requested (0: admin queue only).
    pub nr_io_queues: u16,
    /// I/O queue entries (capped by CAP.MQES + 1 and MAXCMD).
    pub queue_size: u16,
    pub admin_queue_size: u16,
    /// Keep-alive timeout in milliseconds; 0 disables keep-alive.
    pub kato_ms: u32,
    /// How long a command may take (admin and I/O).
    pub command_timeout: Duration,
    /// Age at which an outstanding command (admin or I/O) is reported, once, with a
    /// `stuck command` warning naming its queue, command id, opcode, age and phase;
    /// zero turns the warning off. Meant to be well under `command_timeout`.
    pub stuck_command_warn: Duration,
    /// How long a transport queue connection may take.
    pub connect_timeout: Duration,
    /// DH-HMAC-CHAP secrets (nvme-cli `--dhchap-secret`, `--dhchap-ctrl-secret`).
    pub dhchap: Option<HostKeys>,
}

impl ConnectOptions {
    /// Defaults for an I/O controller: one I/O queue per CPU, 128 entries, KATO 5 s.
    pub fn new(subnqn: Nqn, hostnqn: Nqn, hostid: [u8; 16]) -> ConnectOptions {
        let cpus = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        let discovery = subnqn.is_discovery();
        ConnectOptions {
            subnqn,
            hostnqn,
            hostid,
            nr_io_queues: if discovery {
                0
            } else {
                u16::try_from(cpus).unwrap_or(u16::MAX)
            },
            queue_size: DEFAULT_QUEUE_SIZE,
            admin_queue_size: DEFAULT_ADMIN_QUEUE_SIZE,
            kato_ms: if discovery { 0 } else { DEFAULT_KATO_MS },
            command_timeout: DEFAULT_COMMAND_TIMEOUT,
            stuck_command_warn: DEFAULT_STUCK_COMMAND_WARN,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            dhchap: None,
        }
    }

    /// Defaults for the discovery controller: no I/O queues, no keep-alive.
    pub fn discovery(hostnqn: Nqn, hostid: [u8; 16]) -> ConnectOptions {
        ConnectOptions::new(Nqn::discovery(), hostnqn, hostid)
    }

    pub(super) fn validate(&self) -> Result<(), Error> {
        if self.admin_queue_size < MIN_QUEUE_SIZE {
            return Err(Error::InvalidArgument(format!(
                "admin queue size {} is below {MIN_QUEUE_SIZE}",
                self.admin_queue_size
            )));
        }
        if self.nr_io_queues > 0 && self.queue_size < MIN_QUEUE_SIZE {
            return Err(Error::InvalidArgument(format!(
                "queue size {} is below {MIN_QUEUE_SIZE}",
                self.queue_size
            )));
        }
        if self.command_timeout.is_zero() {
            return Err(Error::InvalidArgument("command timeout is zero".into()));
        }
        Ok(())
    }
}
