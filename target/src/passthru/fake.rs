//! A fake [`NvmeController`] for tests: in-memory Identify data, a few namespaces,
//! canned answers per opcode, and a record of every command that reached it.
//!
//! Owns nothing but its own state; it exists so the passthru logic (routing,
//! Identify fix-ups, the allowed list) is tested without an NVMe device, and so a
//! test can prove a refused command never arrived.

use std::collections::BTreeMap;
use std::path::PathBuf;

use parking_lot::Mutex;

use nvmf_common::types::Nsid;
use nvmf_common::wire::admin::{self, cns, opcode};
use nvmf_common::wire::identify::{
    write_active_ns_list, write_ns_id_descriptors, IdentifyController, IdentifyNamespace,
    LbaFormat, NsIdDescriptor, IDENTIFY_LEN,
};
use nvmf_common::wire::sqe::{Sqe, SQE_LEN};
use nvmf_common::wire::status::{generic, Status};

use super::device::{DataBuf, DeviceCompletion, DeviceError, NvmeController};
use super::fake_io::FakeIo;
use crate::backend::IoChannel;
use std::sync::Arc;

/// The fake's model, serial and firmware: what a host must see through passthru.
pub const FAKE_MODEL: &str = "Fake NVMe SSD";
pub const FAKE_SERIAL: &str = "FAKE0001";
pub const FAKE_FIRMWARE: &str = "1.2.3";
/// The fake's version (VS / Identify VER): NVMe 1.4.
pub const FAKE_VERSION: u32 = nvmf_common::wire::fabrics::NVME_VS_1_4;
/// Its controller id on the PCIe side, which a fabric host must never see.
pub const FAKE_CNTLID: u16 = 0x41;
/// Its MDTS: 2^9 pages of 4 KiB = 2 MiB.
pub const FAKE_MDTS: u8 = 9;

/// One command as the fake received it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    pub sqe: [u8; SQE_LEN],
    /// Host-to-controller data it carried.
    pub data_in: Vec<u8>,
    /// Length of the controller-to-host buffer it was given.
    pub data_out_len: usize,
}

/// One namespace of the fake.
#[derive(Debug, Clone)]
pub struct FakeNamespace {
    pub id_ns: Vec<u8>,
    pub descriptors: Vec<u8>,
    pub generic_path: PathBuf,
}

/// A canned answer: completion plus the data a controller-to-host command returns.
#[derive(Debug, Clone)]
pub struct Canned {
    pub completion: DeviceCompletion,
    pub data: Vec<u8>,
}

/// The fake controller.
#[derive(Debug)]
pub struct FakeController {
    pub id_ctrl: Vec<u8>,
    pub namespaces: BTreeMap<u32, FakeNamespace>,
    canned: Mutex<BTreeMap<u8, Canned>>,
    received: Mutex<Vec<Received>>,
    /// The I/O side: blocks, zones and the I/O commands received.
    pub io: Arc<FakeIo>,
}

impl FakeController {
    /// A controller with namespaces `nsids` (8 GiB of 512-byte blocks each, with
    /// NGUID, EUI64, UUID and CSI descriptors, and one metadata LBA format).
    pub fn new(nsids: &[u32]) -> Self {
        let mut id_ctrl = vec![0u8; IDENTIFY_LEN];
        {
            use nvmf_common::wire::identify::{cmic, ctratt, oacs, oaes, oncs, sgls};
            let mut id = IdentifyController::new_unchecked(&mut id_ctrl[..]);
            id.set_vid(0x1B36);
            id.set_ssvid(0x1AF4);
            id.set_sn(FAKE_SERIAL);
            id.set_mn(FAKE_MODEL);
            id.set_fr(FAKE_FIRMWARE);
            id.set_ieee([0x00, 0x54, 0x52]);
            id.set_cmic(cmic::SRIOV | cmic::ANA);
            id.set_mdts(FAKE_MDTS);
            id.set_cntlid(FAKE_CNTLID);
            id.set_ver(FAKE_VERSION);
            id.set_oaes(oaes::NS_ATTR | oaes::FW_ACTIVATION);
            id.set_ctratt(ctratt::ELBAS | ctratt::RHII | ctratt::NVM_SETS);
            id.set_oacs(oacs::SECURITY | oacs::FORMAT | oacs::FW | oacs::NS_MGMT | oacs::DBBUF);
            id.set_acl(7);
            id.set_aerl(7);
            id.set_kas(0);
            id.set_hmpre(1024);
            id.set_hmmin(256);
            id.set_sanicap(0b111);
            id.set_anacap(0x1F);
            id.set_anatt(10);
            id.set_anagrpmax(4);
            id.set_nanagrpid(4);
            id.set_sqes(0x66);
            id.set_cqes(0x44);
            id.set_maxcmd(1024);
            id.set_nn(nsids.iter().copied().max().unwrap_or(0));
            id.set_oncs(oncs::COMPARE | oncs::DSM | oncs::WRITE_ZEROES | oncs::RESERVATIONS);
            id.set_fuses(1);
            id.set_sgls(sgls::SUPPORTED_DWORD_ALIGNED);
            id.set_subnqn("nqn.2019-08.org.qemu:fake-serial");
            id.set_msdbd(0);
        }
        let namespaces = nsids
            .iter()
            .map(|&nsid| (nsid, fake_namespace(nsid)))
            .collect();
        let io = Arc::new(FakeIo::default());
        for &nsid in nsids {
            io.add_namespace(nsid, FAKE_BLOCK_SIZE, FAKE_BLOCKS);
        }
        FakeController {
            id_ctrl,
            namespaces,
            canned: Mutex::new(BTreeMap::new()),
            received: Mutex::new(Vec::new()),
            io,
        }
    }

    /// Every later command with `opcode` gets this answer, except Identify
    /// Controller, Namespace, Active Namespace ID list and descriptor list, which the
    /// fake serves from its own data. Commands without an answer succeed with no data.
    pub fn answer(&self, opcode: u8, canned: Canned) {
        self.canned.lock().insert(opcode, canned);
    }

    /// The commands received so far, in order.
    pub fn received(&self) -> Vec<Received> {
        self.received.lock().clone()
    }

    /// The opcodes received so far, in order.
    pub fn received_opcodes(&self) -> Vec<u8> {
        self.received.lock().iter().map(|r| r.sqe[0]).collect()
    }

    /// Pulls the device: every later admin and I/O command fails as on a removed
    /// device node (ENODEV).
    pub fn unplug(&self) {
        self.io
            .unplugged
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// Forgets what was received.
    pub fn clear_received(&self) {
        self.received.lock().clear()
    }

    /// The Identify data the fake holds for `cmd`, or the status a controller gives.
    fn identify(&self, cmd: &Sqe<[u8; SQE_LEN]>) -> Result<Vec<u8>, Status> {
        let nsid = cmd.nsid();
        let invalid_ns = || Status::generic_dnr(generic::INVALID_NAMESPACE);
        match admin::identify_cns(cmd) {
            cns::CONTROLLER => Ok(self.id_ctrl.clone()),
            cns::NAMESPACE => {
                if nsid == 0 || nsid == Nsid::BROADCAST.0 {
                    return Err(invalid_ns());
                }
                // An inactive NSID reads as zeroes.
                Ok(self
                    .namespaces
                    .get(&nsid)
                    .map_or_else(|| vec![0u8; IDENTIFY_LEN], |n| n.id_ns.clone()))
            }
            cns::ACTIVE_NS_LIST => {
                let mut page = vec![0u8; IDENTIFY_LEN];
                let ids = self.namespaces.keys().copied().filter(|&i| i > nsid);
                write_active_ns_list(&mut page, ids);
                Ok(page)
            }
            cns::NS_ID_DESCRIPTOR_LIST => self
                .namespaces
                .get(&nsid)
                .map(|n| n.descriptors.clone())
                .ok_or_else(invalid_ns),
            // Other CNS values come from the canned table (see `admin`).
            _ => Err(Status::generic_dnr(generic::INVALID_FIELD)),
        }
    }
}

/// Blocks of each fake namespace, and their size (format 0).
pub const FAKE_BLOCKS: u64 = 16 << 20;
pub const FAKE_BLOCK_SIZE: usize = 512;

/// Namespace `nsid`: 16 Mi blocks of 512 bytes, format 1 with 8 bytes of metadata.
fn fake_namespace(nsid: u32) -> FakeNamespace {
    const BLOCKS: u64 = FAKE_BLOCKS;
    let mut id_ns = vec![0u8; IDENTIFY_LEN];
    let nguid = [nsid as u8; 16];
    let eui64 = [0xE0 | nsid as u8; 8];
    let uuid = [0x50 | nsid as u8; 16];
    {
        use nvmf_common::wire::identify::{dpc, mc};
        let mut id = IdentifyNamespace::new_unchecked(&mut id_ns[..]);
        id.set_nsze(BLOCKS);
        id.set_ncap(BLOCKS);
        id.set_nuse(BLOCKS / 2);
        id.set_nlbaf(1);
        id.set_flbas(0);
        id.set_mc(mc::EXTENDED_LBA | mc::METADATA_PTR);
        id.set_dpc(dpc::PI_TYPE1);
        // Private to its one PCIe controller, as a client drive's usually is.
        id.set_nmic(0);
        id.set_rescap(0xFF);
        id.set_anagrpid(1);
        id.set_nguid(nguid);
        id.set_eui64(eui64);
        id.set_lbaf(0, LbaFormat::new(9));
        id.set_lbaf(
            1,
            LbaFormat {
                ms: 8,
                ds: 12,
                rp: 0,
            },
        );
    }
    let mut descriptors = vec![0u8; IDENTIFY_LEN];
    write_ns_id_descriptors(
        &mut descriptors,
        &[
            NsIdDescriptor::Eui64(eui64),
            NsIdDescriptor::Nguid(nguid),
            NsIdDescriptor::Uuid(uuid),
            NsIdDescriptor::Csi(admin::csi::NVM),
        ],
    );
    FakeNamespace {
        id_ns,
        descriptors,
        generic_path: PathBuf::from(format!("/dev/ng9n{nsid}")),
    }
}

impl NvmeController for FakeController {
    fn admin(
        &self,
        cmd: &Sqe<[u8; SQE_LEN]>,
        data: DataBuf<'_>,
    ) -> Result<DeviceCompletion, DeviceError> {
        if self.io.unplugged.load(std::sync::atomic::Ordering::Acquire) {
            return Err(DeviceError::from_errno(nix::errno::Errno::ENODEV));
        }
        let op = cmd.opcode();
        if !data.matches_opcode(op) {
            return Err(DeviceError::Direction {
                opcode: op,
                len: data.len(),
            });
        }
        self.received.lock().push(Received {
            sqe: cmd.into_inner(),
            data_in: match &data {
                DataBuf::ToDevice(b) => b.to_vec(),
                _ => Vec::new(),
            },
            data_out_len: match &data {
                DataBuf::FromDevice(b) => b.len(),
                _ => 0,
            },
        });
        let served = op == opcode::IDENTIFY
            && matches!(
                admin::identify_cns(cmd),
                cns::CONTROLLER | cns::NAMESPACE | cns::ACTIVE_NS_LIST | cns::NS_ID_DESCRIPTOR_LIST
            );
        let (completion, payload) = if served {
            match self.identify(cmd) {
                Ok(page) => (DeviceCompletion::success(0), page),
                Err(s) => (
                    DeviceCompletion {
                        status: s,
                        dw0: 0,
                        dw1: 0,
                    },
                    Vec::new(),
                ),
            }
        } else {
            match self.canned.lock().get(&op) {
                Some(c) => (c.completion, c.data.clone()),
                None => (DeviceCompletion::success(0), Vec::new()),
            }
        };
        if let DataBuf::FromDevice(out) = data {
            let n = out.len().min(payload.len());
            if let (Some(dst), Some(src)) = (out.get_mut(..n), payload.get(..n)) {
                dst.copy_from_slice(src);
            }
        }
        Ok(completion)
    }

    fn name(&self) -> String {
        "fake".to_string()
    }

    fn generic_ns_path(&self, nsid: u32) -> Result<Option<PathBuf>, DeviceError> {
        Ok(self.namespaces.get(&nsid).map(|n| n.generic_path.clone()))
    }

    fn open_io(
        &self,
        _nsid: u32,
        _generic: Option<&std::path::Path>,
    ) -> Result<Box<dyn IoChannel>, DeviceError> {
        Ok(Box::new(self.io.channel()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_and_their_generic_devices_are_enumerated() {
        let dev = FakeController::new(&[1, 2, 5]);
        assert_eq!(dev.active_namespaces().unwrap(), [1, 2, 5]);
        assert_eq!(
            dev.generic_ns_path(5).unwrap(),
            Some(PathBuf::from("/dev/ng9n5"))
        );
        assert_eq!(dev.generic_ns_path(3).unwrap(), None);
        // More than one list's worth: the walk continues after each full page.
        let many: Vec<u32> = (1..=2500).collect();
        let dev = FakeController::new(&many);
        assert_eq!(dev.active_namespaces().unwrap(), many);
        assert_eq!(dev.received().len(), 3);
    }

    #[test]
    fn records_commands_and_refuses_a_buffer_going_the_wrong_way() {
        let dev = FakeController::new(&[1]);
        let mut cmd = Sqe::new_unchecked([0u8; SQE_LEN]);
        cmd.set_opcode(opcode::IDENTIFY);
        cmd.set_cdw10(u32::from(cns::CONTROLLER));
        let e = dev.admin(&cmd, DataBuf::ToDevice(&[0; 8])).unwrap_err();
        assert!(matches!(e, DeviceError::Direction { .. }), "{e}");
        assert!(dev.received().is_empty());
        let mut page = vec![0u8; IDENTIFY_LEN];
        let c = dev.admin(&cmd, DataBuf::FromDevice(&mut page)).unwrap();
        assert_eq!(c, DeviceCompletion::success(0));
        assert_eq!(
            IdentifyController::new_unchecked(&page[..]).mn_string(),
            FAKE_MODEL
        );
        assert_eq!(dev.received_opcodes(), [opcode::IDENTIFY]);
        assert_eq!(dev.received()[0].data_out_len, IDENTIFY_LEN);
    }
}
