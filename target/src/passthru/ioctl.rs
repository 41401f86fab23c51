//! The real [`NvmeController`]: a Linux NVMe controller character device
//! (`/dev/nvmeX`) driven through the NVMe admin ioctl (`NVME_IOCTL_ADMIN64_CMD`).
//!
//! Owns the device file and the only `unsafe` of the passthru module: the ioctl
//! calls. Each call blocks until the device completes the command (or the kernel's
//! timeout expires), so this runs on the control path, never on a poll group. The
//! kernel builds the PRPs from our buffer and uses its own command identifier; we
//! hand it the command dwords, one buffer and never a metadata pointer.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use tracing::debug;

use nvmf_common::wire::sqe::{Sqe, SQE_LEN};
use nvmf_common::wire::status::Status;

use super::device::{DataBuf, DeviceCompletion, DeviceError, NvmeController};
use super::naming;

/// `'N'`: the ioctl type of the NVMe driver (`include/uapi/linux/nvme_ioctl.h`).
const NVME_IOCTL_TYPE: u8 = b'N';
/// `NVME_IOCTL_ID`: the NSID of a namespace device node.
const NVME_IOCTL_ID_NR: u8 = 0x40;
/// `NVME_IOCTL_ADMIN64_CMD`: an admin command with a 64-bit result.
const NVME_IOCTL_ADMIN64_CMD_NR: u8 = 0x47;
/// Largest value of the 15-bit status field the ioctl returns on an NVMe error.
const STATUS_FIELD_MAX: i32 = 0x7FFF;
/// `timeout_ms` 0: the driver's default admin timeout.
const DEFAULT_TIMEOUT: u32 = 0;
/// Where device nodes live.
const DEV_DIR: &str = "/dev";

/// Linux `struct nvme_passthru_cmd64`: the command dwords, one user buffer, the
/// timeout, and the 64-bit result the kernel writes back.
// Every field but `result` is only read by the kernel.
#[allow(dead_code)]
#[repr(C)]
#[derive(Debug, Default)]
struct PassthruCmd64 {
    opcode: u8,
    flags: u8,
    rsvd1: u16,
    nsid: u32,
    cdw2: u32,
    cdw3: u32,
    metadata: u64,
    addr: u64,
    metadata_len: u32,
    data_len: u32,
    cdw10: u32,
    cdw11: u32,
    cdw12: u32,
    cdw13: u32,
    cdw14: u32,
    cdw15: u32,
    timeout_ms: u32,
    rsvd2: u32,
    result: u64,
}

/// The kernel's layout: 80 bytes, the result at byte 72.
const _: () = assert!(std::mem::size_of::<PassthruCmd64>() == 80);
const _: () = assert!(std::mem::offset_of!(PassthruCmd64, result) == 72);

/// The ioctl wrappers, private like the structure they take.
mod sys {
    use super::{PassthruCmd64, NVME_IOCTL_ADMIN64_CMD_NR, NVME_IOCTL_ID_NR, NVME_IOCTL_TYPE};

    nix::ioctl_readwrite!(
        nvme_admin64_cmd,
        NVME_IOCTL_TYPE,
        NVME_IOCTL_ADMIN64_CMD_NR,
        PassthruCmd64
    );
    nix::ioctl_none!(nvme_ioctl_id, NVME_IOCTL_TYPE, NVME_IOCTL_ID_NR);
}

/// Why a controller device could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}: not a character device (passthru takes the controller, /dev/nvmeX)")]
    NotCharDevice(PathBuf),
    #[error("{0}: not an NVMe controller device (/dev/nvmeX)")]
    NotController(PathBuf),
}

/// An open NVMe controller character device.
#[derive(Debug)]
pub struct CharDevice {
    /// The path as configured (for logs).
    path: PathBuf,
    file: File,
    /// `X` of `/dev/nvmeX`, after resolving symlinks.
    instance: u32,
    admin_timeout_ms: u32,
}

impl CharDevice {
    /// Opens the controller at `path` (symlinks resolved) for admin commands, each
    /// given `admin_timeout_ms` (`None`: the driver's default).
    pub fn open(path: &Path, admin_timeout_ms: Option<u32>) -> Result<Self, OpenError> {
        let io = |source| OpenError::Io {
            path: path.to_path_buf(),
            source,
        };
        let real = std::fs::canonicalize(path).map_err(io)?;
        let meta = std::fs::metadata(&real).map_err(io)?;
        if !meta.file_type().is_char_device() {
            return Err(OpenError::NotCharDevice(path.to_path_buf()));
        }
        let instance = naming::controller_instance(&real)
            .ok_or_else(|| OpenError::NotController(real.clone()))?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&real)
            .map_err(io)?;
        Ok(CharDevice {
            path: path.to_path_buf(),
            file,
            instance,
            admin_timeout_ms: admin_timeout_ms.unwrap_or(DEFAULT_TIMEOUT),
        })
    }

    /// The NSID of the namespace device node at `path`.
    fn node_nsid(path: &Path) -> Result<u32, DeviceError> {
        let file = File::open(path).map_err(DeviceError::Io)?;
        // SAFETY: NVME_IOCTL_ID takes no argument and only returns a number; the
        // descriptor is open for the whole call.
        let id =
            unsafe { sys::nvme_ioctl_id(file.as_raw_fd()) }.map_err(DeviceError::from_errno)?;
        u32::try_from(id).map_err(|_| DeviceError::BadStatus(id))
    }
}

impl NvmeController for CharDevice {
    fn open_io(
        &self,
        nsid: u32,
        generic: Option<&Path>,
    ) -> Result<Box<dyn crate::backend::IoChannel>, DeviceError> {
        let p = generic.ok_or_else(|| {
            DeviceError::Gone(std::io::Error::other(format!(
                "namespace {nsid} of {} has no generic character device (/dev/ngXnY)",
                self.name()
            )))
        })?;
        Ok(Box::new(super::uring::UringChannel::open(p)?))
    }

    fn admin(
        &self,
        cmd: &Sqe<[u8; SQE_LEN]>,
        mut data: DataBuf<'_>,
    ) -> Result<DeviceCompletion, DeviceError> {
        let opcode = cmd.opcode();
        if !data.matches_opcode(opcode) {
            return Err(DeviceError::Direction {
                opcode,
                len: data.len(),
            });
        }
        let len = data.len();
        let data_len = u32::try_from(len).map_err(|_| DeviceError::TooLarge(len))?;
        let addr = match &mut data {
            DataBuf::None => 0,
            DataBuf::ToDevice(b) => b.as_ptr() as u64,
            DataBuf::FromDevice(b) => b.as_mut_ptr() as u64,
        };
        let mut c = PassthruCmd64 {
            opcode,
            nsid: cmd.nsid(),
            cdw2: cmd.cdw2(),
            cdw3: cmd.cdw3(),
            addr,
            data_len,
            cdw10: cmd.cdw10(),
            cdw11: cmd.cdw11(),
            cdw12: cmd.cdw12(),
            cdw13: cmd.cdw13(),
            cdw14: cmd.cdw14(),
            cdw15: cmd.cdw15(),
            timeout_ms: self.admin_timeout_ms,
            ..PassthruCmd64::default()
        };
        // SAFETY: `c` is a valid nvme_passthru_cmd64 the kernel reads and writes back
        // (the result) during the call. `addr`/`data_len` describe `data`'s buffer,
        // borrowed for this whole function: the kernel writes into it only when the
        // opcode says controller-to-host, which `matches_opcode` tied to a `&mut`
        // buffer, and reads it otherwise. Metadata pointer and length stay 0, flags
        // 0, so nothing else of this process is named to the kernel.
        let rc = unsafe { sys::nvme_admin64_cmd(self.file.as_raw_fd(), &mut c) };
        let rc = rc.map_err(DeviceError::from_errno)?;
        // 0 is success; a positive value is the completion's 15-bit status field.
        if !(0..=STATUS_FIELD_MAX).contains(&rc) {
            return Err(DeviceError::BadStatus(rc));
        }
        let field = u16::try_from(rc).map_err(|_| DeviceError::BadStatus(rc))?;
        Ok(DeviceCompletion {
            status: Status::from_field(field),
            dw0: c.result as u32,
            dw1: (c.result >> 32) as u32,
        })
    }

    fn name(&self) -> String {
        self.path.display().to_string()
    }

    fn generic_ns_path(&self, nsid: u32) -> Result<Option<PathBuf>, DeviceError> {
        let dir = Path::new(DEV_DIR);
        let names: Vec<String> = std::fs::read_dir(dir)
            .map_err(DeviceError::Io)?
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .collect();
        for candidate in naming::generic_candidates(dir, self.instance, names) {
            match Self::node_nsid(&candidate) {
                Ok(id) if id == nsid => return Ok(Some(candidate)),
                Ok(_) => {}
                // One unreadable node does not hide the others.
                Err(e) => {
                    debug!(path = %candidate.display(), error = %e, "cannot ask a namespace node its NSID")
                }
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passthru_cmd64_layout_matches_the_kernel() {
        assert_eq!(std::mem::offset_of!(PassthruCmd64, nsid), 4);
        assert_eq!(std::mem::offset_of!(PassthruCmd64, metadata), 16);
        assert_eq!(std::mem::offset_of!(PassthruCmd64, addr), 24);
        assert_eq!(std::mem::offset_of!(PassthruCmd64, data_len), 36);
        assert_eq!(std::mem::offset_of!(PassthruCmd64, cdw10), 40);
        assert_eq!(std::mem::offset_of!(PassthruCmd64, timeout_ms), 64);
        // _IOWR('N', 0x47, 80 bytes), as the kernel header computes it.
        assert_eq!(
            nix::request_code_readwrite!(NVME_IOCTL_TYPE, NVME_IOCTL_ADMIN64_CMD_NR, 80),
            0xC050_4E47
        );
    }

    #[test]
    fn open_refuses_what_is_not_a_controller() {
        let e = CharDevice::open(Path::new("/dev/null"), None).unwrap_err();
        assert!(matches!(e, OpenError::NotController(_)), "{e}");
        let dir = std::env::temp_dir();
        let e = CharDevice::open(&dir, None).unwrap_err();
        assert!(matches!(e, OpenError::NotCharDevice(_)), "{e}");
        let e = CharDevice::open(Path::new("/dev/nvme-no-such"), None).unwrap_err();
        assert!(matches!(e, OpenError::Io { .. }), "{e}");
    }
}
