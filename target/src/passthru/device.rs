//! The NVMe controller a passthru subsystem forwards commands to: the
//! [`NvmeController`] trait, its data buffers, completions and errors.
//!
//! Owns the contract between the passthru logic (routing, Identify fix-ups) and a
//! device: [`super::ioctl::CharDevice`] (a real `/dev/nvmeX`) and
//! [`super::fake::FakeController`] (tests) implement it. Admin commands block until
//! the device completes them, so callers run them on the control path, never on a
//! poll group.

use std::path::{Path, PathBuf};

use crate::backend::IoChannel;

use nvmf_common::wire::admin::{cns, opcode, set_identify};
use nvmf_common::wire::identify::{parse_ns_list, IDENTIFY_LEN, NS_LIST_MAX};
use nvmf_common::wire::sqe::{Sqe, SQE_LEN};
use nvmf_common::wire::status::{generic, path, Sct, Status};

/// Bits 1:0 of an opcode: the direction of its data transfer (NVMe Base
/// "Opcodes for Admin Commands"), which the Linux driver also follows.
const XFER_MASK: u8 = 0b11;
/// 01b: host to controller.
const XFER_TO_DEVICE: u8 = 0b01;
/// 10b: controller to host.
const XFER_FROM_DEVICE: u8 = 0b10;
/// NSIDs the Identify Active Namespace ID list continues after: 0 starts the walk.
const FIRST_LIST_START: u32 = 0;

/// The data buffer of one command, in the direction the command moves it.
#[derive(Debug)]
pub enum DataBuf<'a> {
    /// The command moves no data.
    None,
    /// Host-to-controller data (Set Features with data, Firmware Image Download...).
    ToDevice(&'a [u8]),
    /// Controller-to-host data (Identify, Get Log Page...): the device fills it.
    FromDevice(&'a mut [u8]),
}

impl DataBuf<'_> {
    /// Bytes moved.
    pub fn len(&self) -> usize {
        match self {
            DataBuf::None => 0,
            DataBuf::ToDevice(b) => b.len(),
            DataBuf::FromDevice(b) => b.len(),
        }
    }

    /// Whether no data moves.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether this buffer's direction is the one `opcode` declares (bits 1:0). A
    /// bidirectional opcode (11b) is refused: one buffer cannot serve both ways, and
    /// the kernel would only read it.
    pub fn matches_opcode(&self, opcode: u8) -> bool {
        match (self, opcode & XFER_MASK) {
            (DataBuf::None, _) => true,
            (DataBuf::ToDevice(b), XFER_TO_DEVICE) => !b.is_empty(),
            (DataBuf::FromDevice(b), XFER_FROM_DEVICE) => !b.is_empty(),
            _ => false,
        }
    }
}

/// What the device answered: its status and result dwords, as it reported them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceCompletion {
    pub status: Status,
    /// Completion dword 0 (command specific).
    pub dw0: u32,
    /// Completion dword 1 (command specific; the upper half of 64-bit results).
    pub dw1: u32,
}

impl DeviceCompletion {
    /// A successful completion with result `dw0`.
    pub const fn success(dw0: u32) -> Self {
        DeviceCompletion {
            status: Status::SUCCESS,
            dw0,
            dw1: 0,
        }
    }
}

/// Why a command did not reach the device or came back without an NVMe completion.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// The data buffer does not move data the way the opcode says (bits 1:0); the
    /// command was not submitted.
    #[error("opcode {opcode:#04x} moves data the other way than its buffer ({len} bytes)")]
    Direction { opcode: u8, len: usize },
    /// The buffer is larger than one ioctl can describe.
    #[error("a {0}-byte buffer is larger than one command can move")]
    TooLarge(usize),
    /// The device node is gone (the controller was removed or reset away).
    #[error("the device is gone: {0}")]
    Gone(#[source] std::io::Error),
    /// The kernel refused the command as formed (bad length, no permission): the
    /// same command would fail again.
    #[error("the kernel refused the command: {0}")]
    Refused(#[source] std::io::Error),
    /// Any other failure to run the command (interrupted, timed out, out of memory).
    #[error("the command failed: {0}")]
    Io(#[source] std::io::Error),
    /// The kernel returned a value that is no NVMe status field.
    #[error("the kernel returned {0}, which is no NVMe status")]
    BadStatus(i32),
}

impl DeviceError {
    /// Classifies an errno from the admin ioctl.
    pub fn from_errno(errno: nix::errno::Errno) -> Self {
        use nix::errno::Errno;
        let io = std::io::Error::from(errno);
        match errno {
            Errno::ENODEV | Errno::ENXIO => DeviceError::Gone(io),
            Errno::EINVAL | Errno::EPERM | Errno::EACCES | Errno::ENOTTY | Errno::EFAULT => {
                DeviceError::Refused(io)
            }
            _ => DeviceError::Io(io),
        }
    }

    /// The status the host gets instead of a device completion. A vanished device
    /// is a path error the host may retry elsewhere (multipath); a command the kernel
    /// refuses as formed fails again, so DNR; anything else is retryable, as nvmet
    /// completes any negative errno with Internal Error.
    pub fn status(&self) -> Status {
        match self {
            DeviceError::Gone(_) => Status::retryable(Sct::PathRelated, path::INTERNAL_PATH_ERROR),
            DeviceError::Direction { .. } | DeviceError::TooLarge(_) | DeviceError::Refused(_) => {
                Status::generic_dnr(generic::INTERNAL_ERROR)
            }
            DeviceError::Io(_) | DeviceError::BadStatus(_) => {
                Status::generic_retryable(generic::INTERNAL_ERROR)
            }
        }
    }
}

/// A local NVMe controller that runs the commands a passthru subsystem forwards.
///
/// Only the command's opcode, NSID, CDW2, CDW3 and CDW10 to CDW15 reach the device.
/// Flags, command identifier, metadata and data pointers belong to the fabric and
/// are replaced by the kernel's own; the data travels in `data`.
pub trait NvmeController: Send + Sync {
    /// Runs one admin command and waits for its completion. `Err` only when the
    /// device gave no NVMe completion; an NVMe error status is an `Ok` completion.
    fn admin(
        &self,
        cmd: &Sqe<[u8; SQE_LEN]>,
        data: DataBuf<'_>,
    ) -> Result<DeviceCompletion, DeviceError>;

    /// A name for logs (the device path).
    fn name(&self) -> String;

    /// The generic character device (`/dev/ngXnY`) through which namespace `nsid`
    /// takes I/O commands of any command set, if it has one.
    fn generic_ns_path(&self, nsid: u32) -> Result<Option<PathBuf>, DeviceError>;

    /// Opens one poll group's I/O channel to namespace `nsid`, whose generic
    /// character device is `generic` (a real device: io_uring NVMe passthrough on it).
    fn open_io(&self, nsid: u32, generic: Option<&Path>)
        -> Result<Box<dyn IoChannel>, DeviceError>;

    /// The active namespace IDs, ascending: Identify Active Namespace ID list
    /// (CNS 02h) pages, each continuing after the last NSID of the previous one.
    fn active_namespaces(&self) -> Result<Vec<u32>, DeviceError> {
        let mut all = Vec::new();
        let mut after = FIRST_LIST_START;
        loop {
            let mut cmd = Sqe::new_unchecked([0u8; SQE_LEN]);
            set_identify(&mut cmd, cns::ACTIVE_NS_LIST, 0, 0);
            cmd.set_nsid(after);
            let mut page = vec![0u8; IDENTIFY_LEN];
            let c = self.admin(&cmd, DataBuf::FromDevice(&mut page))?;
            if !c.status.is_success() {
                return Err(DeviceError::Io(std::io::Error::other(format!(
                    "Identify Active Namespace ID list: {}",
                    c.status
                ))));
            }
            let ids = parse_ns_list(&page);
            // Keep only what continues the walk: a device repeating or going back
            // would otherwise loop forever.
            let fresh: Vec<u32> = ids.iter().copied().filter(|&id| id > after).collect();
            let full = ids.len() == NS_LIST_MAX;
            match fresh.last() {
                Some(&last) if full => {
                    all.extend(fresh);
                    after = last;
                }
                _ => {
                    all.extend(fresh);
                    return Ok(all);
                }
            }
        }
    }
}

/// An opcode's transfer direction bits, for callers building a [`DataBuf`].
pub fn opcode_moves_to_device(op: u8) -> bool {
    op & XFER_MASK == XFER_TO_DEVICE
}

/// Whether `op` moves controller-to-host data.
pub fn opcode_moves_from_device(op: u8) -> bool {
    op & XFER_MASK == XFER_FROM_DEVICE
}

/// Identify is controller-to-host, as the direction rule expects.
const _: () = assert!(opcode::IDENTIFY & XFER_MASK == XFER_FROM_DEVICE);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_direction_follows_opcode_bits() {
        let mut b = [0u8; 8];
        assert!(DataBuf::None.matches_opcode(opcode::IDENTIFY));
        assert!(DataBuf::FromDevice(&mut b).matches_opcode(opcode::IDENTIFY));
        assert!(!DataBuf::ToDevice(&b).matches_opcode(opcode::IDENTIFY));
        assert!(DataBuf::ToDevice(&b).matches_opcode(opcode::FW_DOWNLOAD));
        assert!(!DataBuf::FromDevice(&mut b).matches_opcode(opcode::FW_DOWNLOAD));
        // Bidirectional (11b) and no-data (00b) opcodes take no buffer.
        assert!(!DataBuf::ToDevice(&b).matches_opcode(0xC3));
        assert!(!DataBuf::FromDevice(&mut b).matches_opcode(opcode::KEEP_ALIVE));
        assert!(!DataBuf::FromDevice(&mut []).matches_opcode(opcode::IDENTIFY));
        assert!(opcode_moves_to_device(opcode::SECURITY_SEND));
        assert!(opcode_moves_from_device(opcode::SECURITY_RECEIVE));
    }

    #[test]
    fn device_errors_map_to_precise_statuses() {
        use nix::errno::Errno;
        let s = DeviceError::from_errno(Errno::ENODEV).status();
        assert!(s.is(Sct::PathRelated, path::INTERNAL_PATH_ERROR) && !s.dnr);
        let s = DeviceError::from_errno(Errno::EACCES).status();
        assert!(s.is(Sct::Generic, generic::INTERNAL_ERROR) && s.dnr);
        let s = DeviceError::from_errno(Errno::EINTR).status();
        assert!(s.is(Sct::Generic, generic::INTERNAL_ERROR) && !s.dnr);
    }
}
