//! The I/O path of a passthru namespace: io_uring NVMe passthrough
//! (`IORING_OP_URING_CMD` with `NVME_URING_CMD_IO`) on the namespace's generic
//! character device `/dev/ngXnY`, one ring per poll group.
//!
//! Owns the ring (128-byte SQEs, 32-byte CQEs), the descriptor of the device node
//! and the buffers of the commands in flight: each slot keeps its command's
//! [`DmaSlice`] until the kernel's completion is reaped, so the kernel never writes
//! into freed memory, and data moves between the host's buffer and the device with
//! no copy. Commands the ring has no room for wait in order in `queued`; at most as
//! many commands as the completion queue holds are in the kernel, so it never
//! overflows. The device's status and 64-bit result come back unchanged.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};

use io_uring::{cqueue, opcode, squeue, types, IoUring};
use nix::sys::eventfd::{EfdFlags, EventFd};

use nvmf_common::wire::sqe::{Sqe, SQE_LEN};
use nvmf_common::wire::status::Status;

use super::device::{opcode_moves_from_device, opcode_moves_to_device, DeviceError};
use crate::backend::ring_drain::wait_in_flight;
use crate::backend::{
    BackendError, CqeResult, DmaSlice, IoChannel, IoCompletion, IoOp, PassthruCmd,
};

/// Ring entries per channel: as deep as the deepest queue a poll group serves.
const RING_ENTRIES: u32 = 256;
/// `'N'`: the NVMe driver's ioctl type.
const NVME_IOCTL_TYPE: u8 = b'N';
/// `NVME_URING_CMD_IO`'s number (`include/uapi/linux/nvme_ioctl.h`).
const NVME_URING_CMD_IO_NR: u8 = 0x80;
/// Bytes of `struct nvme_uring_cmd`.
const URING_CMD_LEN: usize = 72;
/// `NVME_URING_CMD_IO`: `_IOWR('N', 0x80, struct nvme_uring_cmd)`.
const NVME_URING_CMD_IO: u32 =
    nix::request_code_readwrite!(NVME_IOCTL_TYPE, NVME_URING_CMD_IO_NR, URING_CMD_LEN) as u32;
/// Largest value of the 15-bit status field a completion's `res` carries.
const STATUS_FIELD_MAX: i32 = 0x7FFF;
/// The one registered file: the namespace's generic device.
const DEVICE_IDX: u32 = 0;

/// Byte offsets inside `struct nvme_uring_cmd`.
mod field {
    pub const OPCODE: usize = 0;
    pub const NSID: usize = 4;
    pub const CDW2: usize = 8;
    pub const CDW3: usize = 12;
    pub const ADDR: usize = 24;
    pub const DATA_LEN: usize = 36;
    pub const CDW10: usize = 40;
}

/// `struct nvme_uring_cmd` for `cmd` with data at `addr`, `len` bytes; flags,
/// metadata and timeout stay 0 (the driver's I/O timeout applies).
fn uring_cmd(cmd: &Sqe<[u8; SQE_LEN]>, addr: u64, len: u32) -> [u8; 80] {
    let mut c = [0u8; 80];
    let mut put = |at: usize, bytes: &[u8]| {
        if let Some(dst) = c.get_mut(at..at + bytes.len()) {
            dst.copy_from_slice(bytes);
        }
    };
    put(field::OPCODE, &[cmd.opcode()]);
    put(field::NSID, &cmd.nsid().to_le_bytes());
    put(field::CDW2, &cmd.cdw2().to_le_bytes());
    put(field::CDW3, &cmd.cdw3().to_le_bytes());
    put(field::ADDR, &addr.to_le_bytes());
    put(field::DATA_LEN, &len.to_le_bytes());
    let dwords = [
        cmd.cdw10(),
        cmd.cdw11(),
        cmd.cdw12(),
        cmd.cdw13(),
        cmd.cdw14(),
        cmd.cdw15(),
    ];
    for (i, d) in dwords.iter().enumerate() {
        put(field::CDW10 + 4 * i, &d.to_le_bytes());
    }
    c
}

/// What a completion's `res` and `big_cqe[0]` mean.
pub fn completion_result(res: i32, result: u64) -> Result<CqeResult, BackendError> {
    let dwords = CqeResult {
        dw0: result as u32,
        dw1: (result >> 32) as u32,
    };
    if res == 0 {
        return Ok(dwords);
    }
    let status = if res < 0 {
        DeviceError::from_errno(nix::errno::Errno::from_raw(-res)).status()
    } else if res <= STATUS_FIELD_MAX {
        Status::from_field(res as u16)
    } else {
        DeviceError::BadStatus(res).status()
    };
    Err(BackendError::Device {
        status,
        result: dwords,
    })
}

/// One command in flight.
struct Slot {
    tag: u64,
    /// Kept until the completion: the kernel moves data in or out of it.
    buf: Option<DmaSlice>,
}

/// A command waiting for room in the ring.
struct Waiting {
    tag: u64,
    cmd: PassthruCmd,
}

/// One poll group's ring to one namespace's generic device.
pub struct UringChannel {
    path: PathBuf,
    ring: IoUring<squeue::Entry128, cqueue::Entry32>,
    /// Keeps the registered descriptor open.
    _file: File,
    eventfd: EventFd,
    slots: Vec<Option<Slot>>,
    free: Vec<usize>,
    queued: VecDeque<Waiting>,
    /// Commands in the kernel (pushed, not reaped).
    in_kernel: usize,
    kernel_cap: usize,
    /// Accepted and not yet handed out by `poll`.
    live: usize,
    /// Completions of commands refused before reaching the kernel.
    ready: Vec<IoCompletion>,
}

impl UringChannel {
    /// Opens `path` (a `/dev/ngXnY`) and a ring for it.
    pub fn open(path: &Path) -> Result<Self, DeviceError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(DeviceError::Io)?;
        let ring = IoUring::<squeue::Entry128, cqueue::Entry32>::builder()
            .build(RING_ENTRIES)
            .map_err(DeviceError::Io)?;
        ring.submitter()
            .register_files(&[file.as_raw_fd()])
            .map_err(DeviceError::Io)?;
        let eventfd =
            EventFd::from_value_and_flags(0, EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)
                .map_err(DeviceError::from_errno)?;
        ring.submitter()
            .register_eventfd(eventfd.as_raw_fd())
            .map_err(DeviceError::Io)?;
        let kernel_cap = ring.params().cq_entries() as usize;
        Ok(UringChannel {
            path: path.to_path_buf(),
            ring,
            _file: file,
            eventfd,
            slots: Vec::with_capacity(RING_ENTRIES as usize),
            free: Vec::new(),
            queued: VecDeque::new(),
            in_kernel: 0,
            kernel_cap,
            live: 0,
            ready: Vec::new(),
        })
    }

    /// Pushes waiting commands while the ring and the completion queue have room.
    fn push_queued(&mut self) {
        while self.in_kernel < self.kernel_cap && !self.ring.submission().is_full() {
            let Some(w) = self.queued.pop_front() else {
                return;
            };
            self.push(w);
        }
    }

    fn push(&mut self, w: Waiting) {
        let sqe = Sqe::new_unchecked(w.cmd.sqe);
        let op = sqe.opcode();
        let (addr, len) = match &w.cmd.buf {
            Some(b) => (b.ptr() as u64, b.len),
            None => (0, 0),
        };
        let moves = opcode_moves_to_device(op) || opcode_moves_from_device(op);
        let Ok(len32) = u32::try_from(len) else {
            return self.refuse(w.tag, DeviceError::TooLarge(len));
        };
        // A buffer the opcode does not move would have the kernel read or write what
        // the host did not mean. A moving opcode may move nothing (Zone Management
        // Send resetting a zone carries no data).
        if len > 0 && (!moves || addr == 0) {
            return self.refuse(w.tag, DeviceError::Direction { opcode: op, len });
        }
        let idx = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(None);
                self.slots.len() - 1
            }
        };
        let entry = opcode::UringCmd80::new(types::Fixed(DEVICE_IDX), NVME_URING_CMD_IO)
            .cmd(uring_cmd(&sqe, addr, len32))
            .build()
            .user_data(idx as u64);
        if let Some(s) = self.slots.get_mut(idx) {
            *s = Some(Slot {
                tag: w.tag,
                buf: w.cmd.buf,
            });
        }
        // SAFETY: the entry names the registered descriptor and `addr`/`len32`
        // describe the command's DmaSlice, which its slot keeps alive until the
        // completion is reaped (and Drop waits for every command in the kernel).
        // push_queued checked that the submission queue has room.
        let pushed = unsafe { self.ring.submission().push(&entry) };
        if pushed.is_ok() {
            self.in_kernel += 1;
        } else if let Some(s) = self.slots.get_mut(idx).and_then(Option::take) {
            // Cannot happen (room was checked); the command goes back to the front.
            self.free.push(idx);
            self.queued.push_front(Waiting {
                tag: s.tag,
                cmd: PassthruCmd {
                    sqe: w.cmd.sqe,
                    buf: s.buf,
                    fabric: None,
                },
            });
        }
    }

    /// Completes a command that never reached the kernel.
    fn refuse(&mut self, tag: u64, e: DeviceError) {
        tracing::warn!(path = %self.path.display(), error = %e, "passthru I/O command not sent");
        self.ready.push((
            tag,
            Err(BackendError::Device {
                status: e.status(),
                result: CqeResult::NONE,
            }),
        ));
    }

    fn reap(&mut self, out: &mut Vec<IoCompletion>) {
        let mut done = Vec::new();
        for cqe in self.ring.completion() {
            done.push((cqe.user_data(), cqe.result(), cqe.big_cqe()[0]));
        }
        for (ud, res, result) in done {
            self.in_kernel = self.in_kernel.saturating_sub(1);
            let idx = ud as usize;
            let Some(slot) = self.slots.get_mut(idx).and_then(Option::take) else {
                tracing::error!(path = %self.path.display(), idx, "completion of no command");
                continue;
            };
            self.free.push(idx);
            self.live = self.live.saturating_sub(1);
            out.push((slot.tag, completion_result(res, result)));
        }
    }
}

impl IoChannel for UringChannel {
    /// The block path's operations are not sent this way: a passthru namespace
    /// takes the host's commands as they are ([`IoChannel::submit_passthru`]).
    fn submit(&mut self, _tag: u64, _op: IoOp) -> Result<(), BackendError> {
        Err(BackendError::Unsupported)
    }

    fn submit_passthru(&mut self, tag: u64, cmd: PassthruCmd) -> Result<(), BackendError> {
        self.live += 1;
        self.queued.push_back(Waiting { tag, cmd });
        Ok(())
    }

    fn flush(&mut self) {
        loop {
            self.push_queued();
            if self.ring.submission().is_empty() {
                break;
            }
            match self.ring.submit() {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => {
                    if !matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EBUSY)) {
                        tracing::error!(path = %self.path.display(), error = %e, "io_uring submit failed");
                    }
                    break;
                }
            }
            if self.queued.is_empty() || self.in_kernel >= self.kernel_cap {
                break;
            }
        }
    }

    fn poll(&mut self, out: &mut Vec<IoCompletion>) -> usize {
        let before = out.len();
        let refused = self.ready.len();
        out.append(&mut self.ready);
        self.live = self.live.saturating_sub(refused);
        self.reap(out);
        if !self.queued.is_empty() {
            self.flush();
        }
        out.len() - before
    }

    fn in_flight(&self) -> usize {
        self.live
    }

    fn event_fd(&self) -> Option<RawFd> {
        Some(self.eventfd.as_raw_fd())
    }
}

impl Drop for UringChannel {
    fn drop(&mut self) {
        // Never pushed: the kernel has not seen these.
        self.queued.clear();
        if let Err(e) = wait_in_flight(&mut self.ring, &mut self.in_kernel) {
            // The kernel may still use the buffers: leak them rather than free memory
            // it could write.
            tracing::error!(path = %self.path.display(), error = %e, in_flight = self.in_kernel, "cannot wait for passthru commands in flight; leaking their buffers");
            std::mem::forget(std::mem::take(&mut self.slots));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvmf_common::wire::status::{generic, path, Sct};

    #[test]
    fn the_ioctl_number_is_the_kernels() {
        // _IOWR('N', 0x80, struct nvme_uring_cmd) from linux/nvme_ioctl.h.
        assert_eq!(NVME_URING_CMD_IO, 0xC048_4E80);
    }

    #[test]
    fn the_command_layout_is_the_kernels() {
        let mut sqe = Sqe::new_unchecked([0u8; SQE_LEN]);
        sqe.set_opcode(0x02);
        sqe.set_nsid(7);
        sqe.set_cdw10(0x1122_3344);
        sqe.set_cdw15(0xAABB_CCDD);
        let c = uring_cmd(&sqe, 0x1000, 4096);
        assert_eq!(c[0], 0x02);
        assert_eq!(&c[4..8], &7u32.to_le_bytes());
        assert_eq!(&c[24..32], &0x1000u64.to_le_bytes());
        assert_eq!(&c[36..40], &4096u32.to_le_bytes());
        assert_eq!(&c[40..44], &0x1122_3344u32.to_le_bytes());
        assert_eq!(&c[60..64], &0xAABB_CCDDu32.to_le_bytes());
        // Timeout and the reserved tail stay 0.
        assert!(c[64..].iter().all(|&b| b == 0));
    }

    #[test]
    fn completions_keep_the_device_status_and_result() {
        assert_eq!(
            completion_result(0, 0x0000_0002_0000_0010),
            Ok(CqeResult { dw0: 0x10, dw1: 2 })
        );
        // Status field 0x4281: DNR, SCT 2h (media), SC 81h (Unrecovered Read Error).
        match completion_result(0x4281, 5) {
            Err(BackendError::Device { status, result }) => {
                assert!(status.is(Sct::MediaError, 0x81) && status.dnr);
                assert_eq!(result, CqeResult { dw0: 5, dw1: 0 });
            }
            other => panic!("{other:?}"),
        }
        // The device went away: a path error the host may retry elsewhere.
        match completion_result(-libc::ENODEV, 0) {
            Err(BackendError::Device { status, .. }) => {
                assert!(status.is(Sct::PathRelated, path::INTERNAL_PATH_ERROR) && !status.dnr)
            }
            other => panic!("{other:?}"),
        }
        match completion_result(-libc::EINTR, 0) {
            Err(BackendError::Device { status, .. }) => {
                assert!(status.is(Sct::Generic, generic::INTERNAL_ERROR) && !status.dnr)
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_file_that_is_no_nvme_device_fails_each_command_with_a_status() {
        // URING_CMD on a regular file: the kernel refuses it (EOPNOTSUPP), and the
        // command completes with a status instead of vanishing.
        let p = std::env::temp_dir().join(format!("not-ng-{}", std::process::id()));
        std::fs::write(&p, [0u8; 4096]).unwrap();
        let mut ch = match UringChannel::open(&p) {
            Ok(c) => c,
            Err(e) => panic!("ring with 128-byte entries: {e}"),
        };
        let mut sqe = Sqe::new_unchecked([0u8; SQE_LEN]);
        sqe.set_opcode(0x00); // Flush: no data
        sqe.set_nsid(1);
        ch.submit_passthru(
            9,
            PassthruCmd {
                sqe: sqe.into_inner(),
                buf: None,
                fabric: None,
            },
        )
        .unwrap();
        ch.flush();
        let mut out = Vec::new();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while out.is_empty() && std::time::Instant::now() < deadline {
            ch.poll(&mut out);
        }
        assert_eq!(out.len(), 1, "no completion");
        assert_eq!(out[0].0, 9);
        assert!(matches!(out[0].1, Err(BackendError::Device { .. })));
        assert_eq!(ch.in_flight(), 0);
        drop(ch);
        let _ = std::fs::remove_file(&p);
    }
}
