//! ANA states per port and group ([`PortAna`]), shared by every description of the
//! port (a port re-described by a live change keeps its states object, so the
//! controllers connected through it see changes at once), and the registry of them
//! ([`AnaPorts`], one per target).
//!
//! The I/O path reads a group's state with one relaxed atomic load; a change is
//! applied whole by [`PortAna::apply`] and counted in the port's change count (the ANA
//! log page's CHGCNT).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::config::AnaGroupConfig;
use nvmf_common::wire::ana::{AnaState, MAX_GROUPS};

/// The ANA states of one port's groups; groups never set are optimized.
pub struct PortAna {
    /// Indexed by group id (0 unused).
    states: Vec<AtomicU8>,
    chgcnt: AtomicU64,
}

impl PortAna {
    fn new() -> PortAna {
        PortAna {
            states: (0..=MAX_GROUPS)
                .map(|_| AtomicU8::new(AnaState::Optimized as u8))
                .collect(),
            chgcnt: AtomicU64::new(0),
        }
    }

    /// The state of group `grpid` on this port (ids outside 1..=128 are refused by the
    /// configuration; they read as inaccessible).
    #[inline]
    pub fn state(&self, grpid: u32) -> AnaState {
        self.states
            .get(grpid as usize)
            .and_then(|s| AnaState::from_u8(s.load(Ordering::Relaxed)))
            .unwrap_or(AnaState::Inaccessible)
    }

    /// The change count (CHGCNT).
    pub fn chgcnt(&self) -> u64 {
        self.chgcnt.load(Ordering::Acquire)
    }

    /// Sets every group to its configured state (unlisted: optimized); returns the
    /// groups that changed, with their new state. A change bumps the change count.
    pub fn apply(&self, groups: &[AnaGroupConfig]) -> Vec<(u32, AnaState)> {
        let mut changed = Vec::new();
        for grpid in 1..=MAX_GROUPS {
            let want = groups
                .iter()
                .find(|g| g.grpid == grpid)
                .map_or(AnaState::Optimized, |g| g.state);
            if let Some(slot) = self.states.get(grpid as usize) {
                if slot.swap(want as u8, Ordering::AcqRel) != want as u8 {
                    changed.push((grpid, want));
                }
            }
        }
        if !changed.is_empty() {
            self.chgcnt.fetch_add(1, Ordering::AcqRel);
        }
        changed
    }
}

/// A port's ANA states, compared by identity (the port description derives `Eq`).
#[derive(Clone)]
pub struct AnaRef(pub Arc<PortAna>);

impl PartialEq for AnaRef {
    fn eq(&self, o: &AnaRef) -> bool {
        Arc::ptr_eq(&self.0, &o.0)
    }
}

impl Eq for AnaRef {}

impl std::fmt::Debug for AnaRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PortAna(chgcnt {})", self.0.chgcnt())
    }
}

impl Default for AnaRef {
    fn default() -> AnaRef {
        AnaRef(Arc::new(PortAna::new()))
    }
}

/// Port id → its ANA states, for the life of the target.
#[derive(Default)]
pub struct AnaPorts {
    map: Mutex<HashMap<u16, Arc<PortAna>>>,
}

impl AnaPorts {
    /// The states of port `portid` (created optimized on first use).
    pub fn for_port(&self, portid: u16) -> AnaRef {
        AnaRef(
            self.map
                .lock()
                .entry(portid)
                .or_insert_with(|| Arc::new(PortAna::new()))
                .clone(),
        )
    }
}
