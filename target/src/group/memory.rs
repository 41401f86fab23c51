//! A [`GroupStore`] in memory, shared by the gateways of one test process: the same
//! compare-and-write and announcements as RADOS, without a cluster.

use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use super::{GroupStore, Versioned};
use crate::config::GroupState;

#[derive(Default)]
pub struct MemoryStore {
    state: Mutex<(Option<u64>, Vec<u8>, u64)>,
    changed: Condvar,
}

impl GroupStore for MemoryStore {
    fn read(&self) -> Result<Versioned, String> {
        let s = self.state.lock();
        let state = match s.0 {
            Some(_) => GroupState::from_bytes(&s.1)?,
            None => GroupState::default(),
        };
        Ok(Versioned {
            version: s.0,
            state,
        })
    }

    fn commit(&self, expect: Option<u64>, state: &GroupState) -> Result<Option<u64>, String> {
        let mut s = self.state.lock();
        if s.0 != expect {
            return Ok(None);
        }
        let v = expect.map_or(1, |v| v + 1);
        s.0 = Some(v);
        s.1 = state.to_bytes()?;
        Ok(Some(v))
    }

    fn announce(&self, _version: u64) {
        self.state.lock().2 += 1;
        self.changed.notify_all();
    }

    fn wait_change(&self, timeout: Duration) {
        let mut s = self.state.lock();
        let seen = s.2;
        let _ = self
            .changed
            .wait_while_for(&mut s, |s| s.2 == seen, timeout);
    }
}
