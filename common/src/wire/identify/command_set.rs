//! The I/O command set specific and independent structures: NVM command set
//! Identify Controller (`struct nvme_id_ctrl_nvm`) and Identify Namespace
//! (`struct nvme_id_ns_nvm`), and the command set independent Identify Namespace
//! (`struct nvme_id_ns_cs_indep`).

use crate::wire::{get_u32, getters, set_u32, setters, view};

use super::{IDENTIFY_LEN, NUM_LBAF};

mod ctrl_nvm {
    use core::ops::Range;
    pub const VSL: Range<usize> = 0..1;
    pub const WZSL: Range<usize> = 1..2;
    pub const WUSL: Range<usize> = 2..3;
    pub const DMRL: Range<usize> = 3..4;
    pub const DMRSL: Range<usize> = 4..8;
    pub const DMSL: Range<usize> = 8..16;
}

view!(
    /// NVM command set specific Identify Controller (CNS 06h, CSI 00h; Linux
    /// `struct nvme_id_ctrl_nvm`).
    IdentifyCtrlNvm,
    IDENTIFY_LEN
);

impl<T: AsRef<[u8]>> IdentifyCtrlNvm<T> {
    getters! {
        /// Verify size limit (log2 of CAP.MPSMIN units, 0 = no limit).
        vsl: u8 = ctrl_nvm::VSL,
        /// Write zeroes size limit.
        wzsl: u8 = ctrl_nvm::WZSL,
        /// Write uncorrectable size limit.
        wusl: u8 = ctrl_nvm::WUSL,
        /// Dataset management ranges limit.
        dmrl: u8 = ctrl_nvm::DMRL,
        /// Dataset management range size limit, blocks.
        dmrsl: u32 = ctrl_nvm::DMRSL,
        /// Dataset management size limit, blocks.
        dmsl: u64 = ctrl_nvm::DMSL,
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> IdentifyCtrlNvm<T> {
    setters! {
        set_vsl: u8 = ctrl_nvm::VSL,
        set_wzsl: u8 = ctrl_nvm::WZSL,
        set_wusl: u8 = ctrl_nvm::WUSL,
        set_dmrl: u8 = ctrl_nvm::DMRL,
        set_dmrsl: u32 = ctrl_nvm::DMRSL,
        set_dmsl: u64 = ctrl_nvm::DMSL,
    }
}

mod ns_nvm {
    use core::ops::Range;
    pub const LBSTM: Range<usize> = 0..8;
    pub const PIC: Range<usize> = 8..9;
    pub const ELBAF: usize = 12;
}

view!(
    /// NVM command set specific Identify Namespace (CNS 05h, CSI 00h; Linux
    /// `struct nvme_id_ns_nvm`).
    IdentifyNsNvm,
    IDENTIFY_LEN
);

impl<T: AsRef<[u8]>> IdentifyNsNvm<T> {
    getters! {
        /// Logical block storage tag mask.
        lbstm: u64 = ns_nvm::LBSTM,
        /// Protection information capabilities.
        pic: u8 = ns_nvm::PIC,
    }
    /// Extended LBA format `i` (0..64; 0 otherwise).
    pub fn elbaf(&self, i: usize) -> u32 {
        if i >= NUM_LBAF {
            return 0;
        }
        let o = ns_nvm::ELBAF + 4 * i;
        get_u32(self.buffer.as_ref(), o..o + 4)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> IdentifyNsNvm<T> {
    setters! {
        set_lbstm: u64 = ns_nvm::LBSTM,
        set_pic: u8 = ns_nvm::PIC,
    }
    pub fn set_elbaf(&mut self, i: usize, v: u32) {
        if i < NUM_LBAF {
            let o = ns_nvm::ELBAF + 4 * i;
            set_u32(self.buffer.as_mut(), o..o + 4, v)
        }
    }
}

mod ns_indep {
    use core::ops::Range;
    pub const NSFEAT: Range<usize> = 0..1;
    pub const NMIC: Range<usize> = 1..2;
    pub const RESCAP: Range<usize> = 2..3;
    pub const FPI: Range<usize> = 3..4;
    pub const ANAGRPID: Range<usize> = 4..8;
    pub const NSATTR: Range<usize> = 8..9;
    pub const NVMSETID: Range<usize> = 10..12;
    pub const ENDGID: Range<usize> = 12..14;
    pub const NSTAT: Range<usize> = 14..15;
}

/// Namespace status (NSTAT; Linux `NVME_NSTAT_NRDY`).
pub mod nstat {
    pub const READY: u8 = 1 << 0;
}

view!(
    /// I/O command set independent Identify Namespace (CNS 08h; Linux
    /// `struct nvme_id_ns_cs_indep`).
    IdentifyNsCsIndep,
    IDENTIFY_LEN
);

impl<T: AsRef<[u8]>> IdentifyNsCsIndep<T> {
    getters! {
        nsfeat: u8 = ns_indep::NSFEAT,
        nmic: u8 = ns_indep::NMIC,
        rescap: u8 = ns_indep::RESCAP,
        fpi: u8 = ns_indep::FPI,
        anagrpid: u32 = ns_indep::ANAGRPID,
        nsattr: u8 = ns_indep::NSATTR,
        nvmsetid: u16 = ns_indep::NVMSETID,
        endgid: u16 = ns_indep::ENDGID,
        nstat: u8 = ns_indep::NSTAT,
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> IdentifyNsCsIndep<T> {
    setters! {
        set_nsfeat: u8 = ns_indep::NSFEAT,
        set_nmic: u8 = ns_indep::NMIC,
        set_rescap: u8 = ns_indep::RESCAP,
        set_fpi: u8 = ns_indep::FPI,
        set_anagrpid: u32 = ns_indep::ANAGRPID,
        set_nsattr: u8 = ns_indep::NSATTR,
        set_nvmsetid: u16 = ns_indep::NVMSETID,
        set_endgid: u16 = ns_indep::ENDGID,
        set_nstat: u8 = ns_indep::NSTAT,
    }
}
