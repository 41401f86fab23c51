//! Reservations (NVMe Base 2.x 8.19, NVM Command Set 7.6-7.9): the four commands'
//! fields and data, the reservation types and which commands each lets a host run,
//! the extended Reservation Status data structure and the Reservation Notification
//! log page. Linux `struct nvme_reservation_status_ext`, `nvme_registered_ctrl_ext`,
//! `nvme_pr_log`.

/// A reservation type (RTYPE).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ResvType {
    WriteExclusive = 1,
    ExclusiveAccess = 2,
    WriteExclusiveRegistrantsOnly = 3,
    ExclusiveAccessRegistrantsOnly = 4,
    WriteExclusiveAllRegistrants = 5,
    ExclusiveAccessAllRegistrants = 6,
}

/// Which command group a command belongs to for reservation checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read, Compare.
    Read,
    /// Write, Write Zeroes, Dataset Management, Flush.
    Write,
}

impl ResvType {
    /// Every type.
    pub const ALL: [ResvType; 6] = [
        ResvType::WriteExclusive,
        ResvType::ExclusiveAccess,
        ResvType::WriteExclusiveRegistrantsOnly,
        ResvType::ExclusiveAccessRegistrantsOnly,
        ResvType::WriteExclusiveAllRegistrants,
        ResvType::ExclusiveAccessAllRegistrants,
    ];

    /// The type with wire value `v`.
    pub fn from_u8(v: u8) -> Option<ResvType> {
        ResvType::ALL.into_iter().find(|t| *t as u8 == v)
    }

    /// Whether every registrant holds the reservation (the "all registrants" types).
    pub fn all_registrants(self) -> bool {
        matches!(
            self,
            ResvType::WriteExclusiveAllRegistrants | ResvType::ExclusiveAccessAllRegistrants
        )
    }

    /// Whether registrants (not only the holder) may access (RO and AR types).
    fn registrants_may(self) -> bool {
        !matches!(self, ResvType::WriteExclusive | ResvType::ExclusiveAccess)
    }

    /// Whether the release of this reservation is notified to registrants
    /// (Reservation Released: the RO and AR types).
    pub fn notifies_release(self) -> bool {
        self.registrants_may()
    }

    /// The spec's table (NVM Command Set, Figure "Command Behavior in the Presence of a
    /// Reservation"): may a host that is (or is not) the holder or a registrant run a
    /// command of `access`?
    pub fn allows(self, access: Access, holder: bool, registrant: bool) -> bool {
        if holder {
            return true;
        }
        let exclusive_access = matches!(
            self,
            ResvType::ExclusiveAccess
                | ResvType::ExclusiveAccessRegistrantsOnly
                | ResvType::ExclusiveAccessAllRegistrants
        );
        match access {
            Access::Read if !exclusive_access => true,
            _ => registrant && self.registrants_may(),
        }
    }
}

/// Command Dword 10 fields.
pub mod cdw10 {
    /// Action (RREGA, RACQA, RRELA), bits 2:0.
    pub const ACTION_MASK: u32 = 0x7;
    /// Ignore Existing Key, bit 3.
    pub const IEKEY: u32 = 1 << 3;
    /// Reservation type, bits 15:8 (Acquire, Release).
    pub const RTYPE_SHIFT: u32 = 8;
    /// Change Persist Through Power Loss State, bits 31:30 (Register).
    pub const CPTPL_SHIFT: u32 = 30;
}

/// Reservation Register actions.
pub mod register_action {
    pub const REGISTER: u8 = 0;
    pub const UNREGISTER: u8 = 1;
    pub const REPLACE: u8 = 2;
}

/// Reservation Acquire actions.
pub mod acquire_action {
    pub const ACQUIRE: u8 = 0;
    pub const PREEMPT: u8 = 1;
    pub const PREEMPT_AND_ABORT: u8 = 2;
}

/// Reservation Release actions.
pub mod release_action {
    pub const RELEASE: u8 = 0;
    pub const CLEAR: u8 = 1;
}

/// CPTPL values.
pub mod cptpl {
    pub const NO_CHANGE: u8 = 0;
    pub const CLEAR: u8 = 2;
    pub const SET: u8 = 3;
}

/// Register and Acquire data (CRKEY + NRKEY or PRKEY) and Release data (CRKEY).
pub const KEYS_DATA_LEN: usize = 16;
pub const RELEASE_DATA_LEN: usize = 8;
/// Reservation Report, Command Dword 11 bit 0: Extended Data Structure.
pub const REPORT_EDS: u32 = 1;
/// The extended Reservation Status header and each registered controller entry.
pub const STATUS_EXT_HDR_LEN: usize = 64;
pub const REGCTL_EXT_LEN: usize = 64;
/// The Reservation Notification log page.
pub const NOTIFICATION_LOG_LEN: usize = 64;
/// Controller ID reported for registrants: dynamic controllers (nvmet).
pub const CNTLID_DYNAMIC: u16 = 0xFFFF;

/// Reservation Notification log page types.
pub mod log_type {
    pub const EMPTY: u8 = 0;
    pub const REGISTRATION_PREEMPTED: u8 = 1;
    pub const RESERVATION_RELEASED: u8 = 2;
    pub const RESERVATION_PREEMPTED: u8 = 3;
}

/// Reservation Notification Mask feature bits (per type above).
pub mod notify_mask {
    pub const REGISTRATION_PREEMPTED: u32 = 1 << 1;
    pub const RESERVATION_RELEASED: u32 = 1 << 2;
    pub const RESERVATION_PREEMPTED: u32 = 1 << 3;
    pub const ALL: u32 = REGISTRATION_PREEMPTED | RESERVATION_RELEASED | RESERVATION_PREEMPTED;
}

/// The two little-endian keys at the start of Register/Acquire data.
pub fn keys(data: &[u8]) -> Option<(u64, u64)> {
    let a = u64::from_le_bytes(data.get(0..8)?.try_into().ok()?);
    let b = data
        .get(8..16)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u64::from_le_bytes);
    Some((a, b))
}

/// One registrant as the extended report lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Registrant {
    pub hostid: [u8; 16],
    pub rkey: u64,
    /// Holds the reservation (RCSTS bit 0).
    pub holds: bool,
}

/// The extended Reservation Status data structure, `len` bytes (entries that do not
/// fit are counted in REGCTL but left out, as the spec allows).
pub fn encode_status_ext(
    gen: u32,
    rtype: Option<ResvType>,
    ptpls: bool,
    regs: &[Registrant],
    len: usize,
) -> Vec<u8> {
    let mut b = vec![0u8; len];
    put(&mut b, 0, &gen.to_le_bytes());
    put(&mut b, 4, &[rtype.map_or(0, |t| t as u8)]);
    put(&mut b, 5, &(regs.len() as u16).to_le_bytes());
    put(&mut b, 9, &[u8::from(ptpls)]);
    for (i, r) in regs.iter().enumerate() {
        let at = STATUS_EXT_HDR_LEN + i * REGCTL_EXT_LEN;
        if at + REGCTL_EXT_LEN > len {
            break;
        }
        put(&mut b, at, &CNTLID_DYNAMIC.to_le_bytes());
        put(&mut b, at + 2, &[u8::from(r.holds)]);
        put(&mut b, at + 8, &r.rkey.to_le_bytes());
        put(&mut b, at + 16, &r.hostid);
    }
    b
}

/// Decodes the extended status (hosts): generation, type, PTPLS, registrants present.
pub fn decode_status_ext(b: &[u8]) -> Option<(u32, u8, bool, Vec<Registrant>)> {
    let gen = u32::from_le_bytes(b.get(0..4)?.try_into().ok()?);
    let rtype = *b.get(4)?;
    let n = u16::from_le_bytes(b.get(5..7)?.try_into().ok()?) as usize;
    let ptpls = *b.get(9)? & 1 != 0;
    let mut regs = Vec::new();
    for i in 0..n {
        let at = STATUS_EXT_HDR_LEN + i * REGCTL_EXT_LEN;
        let Some(e) = b.get(at..at + REGCTL_EXT_LEN) else {
            break;
        };
        regs.push(Registrant {
            holds: e.get(2).is_some_and(|v| v & 1 != 0),
            rkey: u64::from_le_bytes(e.get(8..16)?.try_into().ok()?),
            hostid: e.get(16..32)?.try_into().ok()?,
        });
    }
    Some((gen, rtype, ptpls, regs))
}

/// One Reservation Notification log page.
pub fn encode_notification(count: u64, ltype: u8, available: u8, nsid: u32) -> Vec<u8> {
    let mut b = vec![0u8; NOTIFICATION_LOG_LEN];
    put(&mut b, 0, &count.to_le_bytes());
    put(&mut b, 8, &[ltype, available]);
    put(&mut b, 12, &nsid.to_le_bytes());
    b
}

fn put(b: &mut [u8], at: usize, src: &[u8]) {
    if let Some(d) = b.get_mut(at..at + src.len()) {
        d.copy_from_slice(src);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The spec's table, row by row: (type, read/write) x (holder, registrant,
    /// non-registrant).
    #[test]
    fn command_behavior_table() {
        use Access::*;
        use ResvType::*;
        let table = [
            // type, access, registrant allowed, non-registrant allowed
            (WriteExclusive, Read, true, true),
            (WriteExclusive, Write, false, false),
            (ExclusiveAccess, Read, false, false),
            (ExclusiveAccess, Write, false, false),
            (WriteExclusiveRegistrantsOnly, Read, true, true),
            (WriteExclusiveRegistrantsOnly, Write, true, false),
            (ExclusiveAccessRegistrantsOnly, Read, true, false),
            (ExclusiveAccessRegistrantsOnly, Write, true, false),
            (WriteExclusiveAllRegistrants, Read, true, true),
            (WriteExclusiveAllRegistrants, Write, true, false),
            (ExclusiveAccessAllRegistrants, Read, true, false),
            (ExclusiveAccessAllRegistrants, Write, true, false),
        ];
        for (t, a, reg, non) in table {
            assert!(t.allows(a, true, true), "{t:?} holder {a:?}");
            assert_eq!(t.allows(a, false, true), reg, "{t:?} registrant {a:?}");
            assert_eq!(t.allows(a, false, false), non, "{t:?} non-registrant {a:?}");
        }
    }

    #[test]
    fn status_layout() {
        let r = Registrant {
            hostid: [7; 16],
            rkey: 0xAB,
            holds: true,
        };
        let b = encode_status_ext(5, Some(ResvType::ExclusiveAccess), true, &[r, r], 64 + 64);
        assert_eq!(b.len(), 128);
        assert_eq!((b[4], b[5], b[9]), (2, 2, 1));
        assert_eq!(&b[64..66], &[0xFF, 0xFF]);
        let (gen, t, p, regs) = decode_status_ext(&b).unwrap();
        assert_eq!(
            (gen, t, p, regs.len()),
            (5, 2, true, 1),
            "the second entry did not fit"
        );
    }
}
