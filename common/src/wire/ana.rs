//! Asymmetric Namespace Access (NVMe Base 2.x, 8.1.1 and 5.16.1.12): the access states,
//! the ANA log page (LID 0Ch) and the limits this implementation reports (nvmet's).

use serde::{Deserialize, Serialize};

use super::status::{path, Sct, Status};

/// ANA groups per subsystem (ANAGRPMAX, NANAGRPID), as nvmet (`NVMET_MAX_ANAGRPS`).
pub const MAX_GROUPS: u32 = 128;
/// The group a namespace belongs to unless configured otherwise.
pub const DEFAULT_GROUP: u32 = 1;
/// ANA transition time reported (ANATT, seconds), as nvmet.
pub const ANATT_SECS: u8 = 10;
/// Get Log Page LSP bit 0 for the ANA log: Return Groups Only (no NSID lists).
pub const LSP_RGO: u8 = 1;
/// ANA log page header: CHGCNT (8), NGRPS (2), reserved (6).
pub const LOG_HEADER_LEN: usize = 16;
/// ANA group descriptor before its NSID list: ANAGRPID (4), NNSIDS (4), CHGCNT (8),
/// ANAS (1), reserved (15).
pub const DESC_HEADER_LEN: usize = 32;

/// An ANA state, in nvmet's configfs vocabulary (`ports/N/ana_groups/G/ana/state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[repr(u8)]
pub enum AnaState {
    Optimized = 0x01,
    NonOptimized = 0x02,
    Inaccessible = 0x03,
    PersistentLoss = 0x04,
    Change = 0x0F,
}

impl AnaState {
    /// Every state.
    pub const ALL: [AnaState; 5] = [
        AnaState::Optimized,
        AnaState::NonOptimized,
        AnaState::Inaccessible,
        AnaState::PersistentLoss,
        AnaState::Change,
    ];

    /// The state with wire value `v`.
    pub fn from_u8(v: u8) -> Option<AnaState> {
        AnaState::ALL.into_iter().find(|s| *s as u8 == v)
    }

    /// nvmet's name.
    pub fn name(self) -> &'static str {
        match self {
            AnaState::Optimized => "optimized",
            AnaState::NonOptimized => "non-optimized",
            AnaState::Inaccessible => "inaccessible",
            AnaState::PersistentLoss => "persistent-loss",
            AnaState::Change => "change",
        }
    }

    /// Parses nvmet's name.
    pub fn from_name(s: &str) -> Option<AnaState> {
        AnaState::ALL.into_iter().find(|x| x.name() == s)
    }

    /// The path-related status an I/O command gets in this state (None: it runs).
    /// Never DNR: the host retries on another path (nvmet `nvmet_check_ana_state`).
    pub fn io_status(self) -> Option<Status> {
        let sc = match self {
            AnaState::Optimized | AnaState::NonOptimized => return None,
            AnaState::Inaccessible => path::ASYMMETRIC_ACCESS_INACCESSIBLE,
            AnaState::PersistentLoss => path::ASYMMETRIC_ACCESS_PERSISTENT_LOSS,
            AnaState::Change => path::ASYMMETRIC_ACCESS_TRANSITION,
        };
        Some(Status::retryable(Sct::PathRelated, sc))
    }
}

impl std::fmt::Display for AnaState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One group of the ANA log page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnaGroupDesc {
    pub grpid: u32,
    pub chgcnt: u64,
    pub state: AnaState,
    /// Namespaces in the group, ascending.
    pub nsids: Vec<u32>,
}

/// Encodes the ANA log page; with `rgo` the NSID lists are left out (NNSIDS 0).
pub fn encode_log(chgcnt: u64, groups: &[AnaGroupDesc], rgo: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(
        LOG_HEADER_LEN
            + groups
                .iter()
                .map(|g| DESC_HEADER_LEN + if rgo { 0 } else { 4 * g.nsids.len() })
                .sum::<usize>(),
    );
    out.extend_from_slice(&chgcnt.to_le_bytes());
    out.extend_from_slice(&(groups.len() as u16).to_le_bytes());
    out.extend_from_slice(&[0; 6]);
    for g in groups {
        let n = if rgo { 0 } else { g.nsids.len() };
        out.extend_from_slice(&g.grpid.to_le_bytes());
        out.extend_from_slice(&(n as u32).to_le_bytes());
        out.extend_from_slice(&g.chgcnt.to_le_bytes());
        out.push(g.state as u8);
        out.extend_from_slice(&[0; 15]);
        for nsid in g.nsids.iter().take(n) {
            out.extend_from_slice(&nsid.to_le_bytes());
        }
    }
    out
}

/// Decodes the ANA log page (hosts); None if it is cut short.
pub fn decode_log(b: &[u8]) -> Option<(u64, Vec<AnaGroupDesc>)> {
    let u32_at = |at: usize| -> Option<u32> {
        Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
    };
    let u64_at = |at: usize| -> Option<u64> {
        Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
    };
    let chgcnt = u64_at(0)?;
    let ngrps = u16::from_le_bytes(b.get(8..10)?.try_into().ok()?);
    let mut at = LOG_HEADER_LEN;
    let mut groups = Vec::new();
    for _ in 0..ngrps {
        let grpid = u32_at(at)?;
        let n = u32_at(at + 4)? as usize;
        let chg = u64_at(at + 8)?;
        let state = AnaState::from_u8(*b.get(at + 16)? & 0x0F)?;
        let mut nsids = Vec::with_capacity(n.min(1024));
        for i in 0..n {
            nsids.push(u32_at(at + DESC_HEADER_LEN + 4 * i)?);
        }
        at += DESC_HEADER_LEN + 4 * n;
        groups.push(AnaGroupDesc {
            grpid,
            chgcnt: chg,
            state,
            nsids,
        });
    }
    Some((chgcnt, groups))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_round_trips_with_linux_layout() {
        let g = vec![
            AnaGroupDesc {
                grpid: 1,
                chgcnt: 3,
                state: AnaState::Optimized,
                nsids: vec![1, 2],
            },
            AnaGroupDesc {
                grpid: 2,
                chgcnt: 3,
                state: AnaState::Inaccessible,
                nsids: vec![5],
            },
        ];
        let b = encode_log(3, &g, false);
        assert_eq!(b.len(), 16 + 32 + 8 + 32 + 4);
        assert_eq!(b[16 + 16], 1, "ANAS at descriptor byte 16");
        assert_eq!(decode_log(&b), Some((3, g.clone())));
        let rgo = encode_log(3, &g, true);
        assert_eq!(rgo.len(), 16 + 64);
        assert_eq!(decode_log(&rgo).map(|(_, v)| v[1].nsids.len()), Some(0));
        assert!(decode_log(&b[..40]).is_none());
    }

    #[test]
    fn states_and_statuses() {
        assert_eq!(AnaState::Optimized.io_status(), None);
        let s = AnaState::Inaccessible
            .io_status()
            .map(|s| (s.sct, s.sc, s.dnr));
        assert_eq!(s, Some((Sct::PathRelated, 0x02, false)));
        for st in AnaState::ALL {
            assert_eq!(AnaState::from_name(st.name()), Some(st));
            assert_eq!(AnaState::from_u8(st as u8), Some(st));
        }
    }
}
