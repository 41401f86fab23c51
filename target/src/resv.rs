//! The reservation of one namespace (NVMe Base 2.x 8.19): registrants by 128-bit host
//! identifier with their keys, the holder and type, the generation, and Persist
//! Through Power Loss (PTPL) to a file (SPDK's behaviour; the Linux target keeps
//! reservations in memory only).
//!
//! Semantics follow the Linux target (`drivers/nvme/target/pr.c`): one registration per
//! host (all its controllers share it), preempt by the holder's key moves the
//! reservation, "all registrants" types pass to another registrant when the holder
//! unregisters. The I/O path reads the reservation type with one atomic load and only
//! takes the lock when a reservation is held. With PTPL on, every change is written to
//! the file atomically (temporary file, fsync, rename, fsync of the directory) before
//! the command completes, and loaded when the namespace is created.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tracing::warn;

use nvmf_common::wire::resv::{
    acquire_action, cptpl, log_type, notify_mask, register_action, release_action, Access,
    Registrant, ResvType,
};
use nvmf_common::wire::sqe;
use nvmf_common::wire::status::{generic, Status};

/// A host identifier (Connect's HOSTID).
pub type HostId = [u8; 16];

/// Something to tell a host: (its identifier, the notification log type).
pub type Notice = (HostId, u8);

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Reg {
    hostid: HostId,
    rkey: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct State {
    generation: u32,
    /// RTYPE, 0 when no reservation is held.
    rtype: u8,
    holder: Option<HostId>,
    registrants: Vec<Reg>,
    ptpl: bool,
}

/// What a successful reservation command changed, for the caller to tell the hosts.
#[derive(Debug, Default)]
pub struct Outcome {
    pub notices: Vec<Notice>,
}

/// The reservation state of a namespace.
pub struct Reservation {
    /// The held reservation's type, 0 when none (the I/O path's fast check).
    rtype: AtomicU8,
    notify_mask: AtomicU32,
    state: Mutex<State>,
    ptpl_file: Option<PathBuf>,
}

fn conflict() -> Status {
    Status::generic_dnr(generic::RESERVATION_CONFLICT)
}

fn invalid(cdw: u16) -> Status {
    Status::generic_dnr(generic::INVALID_FIELD).at(cdw, 0)
}

impl Reservation {
    /// No registrants; PTPL possible when `ptpl_file` is set, and the state it holds
    /// is restored (a file that cannot be read or parsed is reported and ignored).
    pub fn new(ptpl_file: Option<PathBuf>) -> Reservation {
        let state = ptpl_file.as_deref().and_then(load).unwrap_or_default();
        Reservation {
            rtype: AtomicU8::new(state.rtype),
            notify_mask: AtomicU32::new(0),
            state: Mutex::new(state),
            ptpl_file,
        }
    }

    /// Whether PTPL can be turned on (a state file is configured).
    pub fn ptpl_capable(&self) -> bool {
        self.ptpl_file.is_some()
    }

    /// PTPL state (Reservation Persistence feature).
    pub fn ptpl(&self) -> bool {
        self.state.lock().ptpl
    }

    /// Sets PTPL (Set Features 83h or Register's CPTPL).
    pub fn set_ptpl(&self, on: bool) -> Result<(), Status> {
        if on && !self.ptpl_capable() {
            return Err(invalid(sqe::offset::CDW11));
        }
        let mut s = self.state.lock();
        s.ptpl = on;
        self.persist(&s)
    }

    pub fn notify_mask(&self) -> u32 {
        self.notify_mask.load(Ordering::Relaxed)
    }

    pub fn set_notify_mask(&self, m: u32) -> Result<(), Status> {
        if m & !notify_mask::ALL != 0 {
            return Err(invalid(sqe::offset::CDW11));
        }
        self.notify_mask.store(m, Ordering::Relaxed);
        Ok(())
    }

    /// Whether `host` may run a command of `access` now.
    #[inline]
    pub fn allows(&self, host: &HostId, access: Access) -> bool {
        let Some(t) = ResvType::from_u8(self.rtype.load(Ordering::Acquire)) else {
            return true;
        };
        let s = self.state.lock();
        let registrant = s.registrants.iter().any(|r| &r.hostid == host);
        let holder = s.holder.as_ref() == Some(host) || (t.all_registrants() && registrant);
        t.allows(access, holder, registrant)
    }

    /// Generation, type, PTPL state and registrants (Reservation Report).
    pub fn report(&self) -> (u32, Option<ResvType>, bool, Vec<Registrant>) {
        let s = self.state.lock();
        let t = ResvType::from_u8(s.rtype);
        let regs = s
            .registrants
            .iter()
            .map(|r| Registrant {
                hostid: r.hostid,
                rkey: r.rkey,
                holds: t.is_some()
                    && (s.holder == Some(r.hostid) || t.is_some_and(ResvType::all_registrants)),
            })
            .collect();
        (s.generation, t, s.ptpl, regs)
    }

    /// Reservation Register.
    pub fn register(
        &self,
        host: &HostId,
        action: u8,
        iekey: bool,
        crkey: u64,
        nrkey: u64,
        change_ptpl: u8,
    ) -> Result<Outcome, Status> {
        let ptpl = match change_ptpl {
            cptpl::NO_CHANGE => None,
            cptpl::CLEAR => Some(false),
            cptpl::SET if self.ptpl_capable() => Some(true),
            _ => return Err(invalid(sqe::offset::CDW10)),
        };
        let mut s = self.state.lock();
        let mut out = Outcome::default();
        let idx = s.registrants.iter().position(|r| &r.hostid == host);
        match action {
            register_action::REGISTER => match idx.and_then(|i| s.registrants.get(i)) {
                Some(r) if r.rkey != nrkey => return Err(conflict()),
                Some(_) => {}
                None => s.registrants.push(Reg {
                    hostid: *host,
                    rkey: nrkey,
                }),
            },
            register_action::UNREGISTER => {
                let i = idx.ok_or_else(conflict)?;
                if !iekey && s.registrants.get(i).map(|r| r.rkey) != Some(crkey) {
                    return Err(conflict());
                }
                self.unregister_one(&mut s, host, &mut out);
            }
            register_action::REPLACE => {
                let i = idx.ok_or_else(conflict)?;
                let r = s.registrants.get_mut(i).ok_or_else(conflict)?;
                if !iekey && r.rkey != crkey {
                    return Err(conflict());
                }
                r.rkey = nrkey;
            }
            _ => return Err(invalid(sqe::offset::CDW10)),
        }
        if let Some(p) = ptpl {
            s.ptpl = p;
        }
        s.generation = s.generation.wrapping_add(1);
        self.commit(&s)?;
        Ok(out)
    }

    /// Reservation Acquire. Returns, besides the notices, the hosts whose registration
    /// was preempted (preempt-and-abort ends their commands' access at once).
    pub fn acquire(
        &self,
        host: &HostId,
        action: u8,
        rtype: u8,
        crkey: u64,
        prkey: u64,
    ) -> Result<Outcome, Status> {
        let t = ResvType::from_u8(rtype).ok_or(invalid(sqe::offset::CDW10))?;
        let mut s = self.state.lock();
        if !s
            .registrants
            .iter()
            .any(|r| &r.hostid == host && r.rkey == crkey)
        {
            return Err(conflict());
        }
        let mut out = Outcome::default();
        let held = ResvType::from_u8(s.rtype);
        match action {
            acquire_action::ACQUIRE => {
                let holds =
                    held.is_some_and(|h| s.holder.as_ref() == Some(host) || h.all_registrants());
                match held {
                    None => self.set_holder(&mut s, *host, t),
                    Some(h) if holds && h == t => {}
                    Some(_) => return Err(conflict()),
                }
                // Acquire does not change the generation.
                self.commit(&s)?;
                return Ok(out);
            }
            acquire_action::PREEMPT | acquire_action::PREEMPT_AND_ABORT => {
                self.preempt(&mut s, host, t, prkey, &mut out)?;
            }
            _ => return Err(invalid(sqe::offset::CDW10)),
        }
        s.generation = s.generation.wrapping_add(1);
        self.commit(&s)?;
        Ok(out)
    }

    /// Reservation Release.
    pub fn release(
        &self,
        host: &HostId,
        action: u8,
        rtype: u8,
        crkey: u64,
    ) -> Result<Outcome, Status> {
        let mut s = self.state.lock();
        if !s
            .registrants
            .iter()
            .any(|r| &r.hostid == host && r.rkey == crkey)
        {
            return Err(conflict());
        }
        let mut out = Outcome::default();
        match action {
            release_action::RELEASE => {
                let Some(held) = ResvType::from_u8(s.rtype) else {
                    return Ok(out);
                };
                let holds = s.holder.as_ref() == Some(host) || held.all_registrants();
                if !holds {
                    return Ok(out);
                }
                if held as u8 != rtype {
                    return Err(invalid(sqe::offset::CDW10));
                }
                self.clear_holder(&mut s);
                if held.notifies_release() {
                    Self::tell_others(&s, host, log_type::RESERVATION_RELEASED, &mut out);
                }
            }
            release_action::CLEAR => {
                self.clear_holder(&mut s);
                Self::tell_others(&s, host, log_type::RESERVATION_PREEMPTED, &mut out);
                s.registrants.clear();
                s.generation = s.generation.wrapping_add(1);
            }
            _ => return Err(invalid(sqe::offset::CDW10)),
        }
        self.commit(&s)?;
        Ok(out)
    }

    fn preempt(
        &self,
        s: &mut State,
        host: &HostId,
        t: ResvType,
        prkey: u64,
        out: &mut Outcome,
    ) -> Result<(), Status> {
        let Some(held) = ResvType::from_u8(s.rtype) else {
            return self.unregister_by_key(s, host, prkey, out);
        };
        if held.all_registrants() {
            if prkey == 0 {
                // Take the reservation, then remove every other registrant.
                self.set_holder(s, *host, t);
                let others: Vec<HostId> = s
                    .registrants
                    .iter()
                    .map(|r| r.hostid)
                    .filter(|h| h != host)
                    .collect();
                for h in others {
                    self.unregister_one(s, &h, out);
                    out.notices.push((h, log_type::REGISTRATION_PREEMPTED));
                }
                return Ok(());
            }
            return self.unregister_by_key(s, host, prkey, out);
        }
        let holder = s.holder;
        let holder_key =
            holder.and_then(|h| s.registrants.iter().find(|r| r.hostid == h).map(|r| r.rkey));
        // PRKEY naming the holder's key preempts the reservation (the holder itself too:
        // a type change); any other PRKEY only removes the registrants holding that key,
        // the holder's own request included (nvmet_pr_preempt does the same).
        if holder_key == Some(prkey) {
            self.set_holder(s, *host, t);
            let victims: Vec<HostId> = s
                .registrants
                .iter()
                .filter(|r| r.rkey == prkey && &r.hostid != host)
                .map(|r| r.hostid)
                .collect();
            for h in victims {
                self.unregister_one(s, &h, out);
                out.notices.push((h, log_type::REGISTRATION_PREEMPTED));
            }
            if held != t {
                Self::tell_others(s, host, log_type::RESERVATION_RELEASED, out);
            }
            return Ok(());
        }
        if prkey == 0 {
            return Err(invalid(sqe::offset::CDW10));
        }
        self.unregister_by_key(s, host, prkey, out)
    }

    /// Removes every registrant with `prkey` (conflict if none).
    fn unregister_by_key(
        &self,
        s: &mut State,
        host: &HostId,
        prkey: u64,
        out: &mut Outcome,
    ) -> Result<(), Status> {
        let victims: Vec<HostId> = s
            .registrants
            .iter()
            .filter(|r| r.rkey == prkey)
            .map(|r| r.hostid)
            .collect();
        if victims.is_empty() {
            return Err(conflict());
        }
        for h in victims {
            self.unregister_one(s, &h, out);
            if &h != host {
                out.notices.push((h, log_type::REGISTRATION_PREEMPTED));
            }
        }
        Ok(())
    }

    fn unregister_one(&self, s: &mut State, host: &HostId, out: &mut Outcome) {
        s.registrants.retain(|r| &r.hostid != host);
        let Some(held) = ResvType::from_u8(s.rtype) else {
            return;
        };
        if held.all_registrants() {
            // The reservation stays with the remaining registrants, if any.
            match s.registrants.first().map(|r| r.hostid) {
                Some(next) => s.holder = Some(next),
                None => self.clear_holder(s),
            }
        } else if s.holder.as_ref() == Some(host) {
            self.clear_holder(s);
            if held.notifies_release() {
                Self::tell_others(s, host, log_type::RESERVATION_RELEASED, out);
            }
        }
    }

    fn set_holder(&self, s: &mut State, host: HostId, t: ResvType) {
        s.holder = Some(host);
        s.rtype = t as u8;
        self.rtype.store(t as u8, Ordering::Release);
    }

    fn clear_holder(&self, s: &mut State) {
        s.holder = None;
        s.rtype = 0;
        self.rtype.store(0, Ordering::Release);
    }

    /// Notices `ltype` for every registrant but `host`.
    fn tell_others(s: &State, host: &HostId, ltype: u8, out: &mut Outcome) {
        for r in s.registrants.iter().filter(|r| &r.hostid != host) {
            out.notices.push((r.hostid, ltype));
        }
    }

    /// Makes the change durable when PTPL is on (or records that it was turned off).
    fn commit(&self, s: &State) -> Result<(), Status> {
        self.persist(s)
    }

    fn persist(&self, s: &State) -> Result<(), Status> {
        let Some(path) = &self.ptpl_file else {
            return Ok(());
        };
        let r = if s.ptpl {
            save(path, s)
        } else {
            // PTPL off: nothing survives a restart.
            match fs::remove_file(path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            }
        };
        r.map_err(|e| {
            warn!(path = %path.display(), "cannot write the reservation state: {e}");
            Status::generic_retryable(generic::INTERNAL_ERROR)
        })
    }
}

fn load(path: &Path) -> Option<State> {
    let text = match fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            warn!(path = %path.display(), "cannot read the reservation state: {e}");
            return None;
        }
    };
    match serde_json::from_str::<State>(&text) {
        Ok(s) if s.ptpl => Some(s),
        Ok(_) => None,
        Err(e) => {
            warn!(path = %path.display(), "reservation state file is not valid: {e}");
            None
        }
    }
}

fn save(path: &Path, s: &State) -> std::io::Result<()> {
    let text = serde_json::to_vec_pretty(s).map_err(std::io::Error::other)?;
    crate::durable::write_atomic(path, &text)
}
