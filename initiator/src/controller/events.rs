//! Asynchronous events: one Asynchronous Event Request kept outstanding on the admin
//! queue, its completions turned into [`AsyncEvent`]s.
//!
//! Owned by the host library; used by long-running hosts (the mapping daemon) that
//! follow namespace and discovery changes as the Linux host does. Ordering:
//! [`Controller::enable_events`] sets Asynchronous Event Configuration first (nvmet
//! and our target send a notice only when its bit is set), then submits the request.
//! [`Controller::poll_events`] takes the completions (the keep-alive thread's
//! `execute` keeps them aside for it), reads the log page each event names without
//! RAE (which re-arms that event type on the controller, as the spec requires before
//! it is reported again), and submits the next request. The request has no timeout:
//! it waits by design (the stuck-command scan knows this opcode too).

use tracing::{debug, warn};

use nvmf_common::types::Nsid;
use nvmf_common::wire::admin::{aer_notice, aer_result_parts, aer_type, fid};
use nvmf_common::wire::log::lid;

use super::Controller;
use crate::command;
use crate::error::{check_status, Error};
use crate::queue::Completion;
use crate::transport::DataDir;

/// The tag of the outstanding Asynchronous Event Request (`execute` uses `u64::MAX`).
const AER_TAG: u64 = u64::MAX - 1;
/// Changed Namespace List log: 1024 NSIDs.
const CHANGED_NS_LOG_LEN: usize = 4096;
/// An NSID size in the Changed Namespace List.
const NSID_LEN: usize = 4;
/// First entry of the Changed Namespace List when more than 1024 namespaces changed.
const CHANGED_NS_OVERFLOW: u32 = 0xFFFF_FFFF;
/// Bytes of the ANA log read to re-arm ANA Change (its header; the host rereads the
/// whole log through its own path when it cares about the states).
const ANA_LOG_HEADER_LEN: usize = 16;
/// Bytes of the Discovery log read to re-arm Discovery Log Page Change (its header).
const DISCOVERY_LOG_HEADER_LEN: usize = 1024;

/// An asynchronous event the controller reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AsyncEvent {
    /// Namespace Attribute Changed, with the Changed Namespace List (`None`: more
    /// than 1024 changed, so every namespace should be looked at again).
    NamespacesChanged(Option<Vec<Nsid>>),
    /// Asymmetric Namespace Access Change.
    AnaChanged,
    /// Discovery Log Page Change (a discovery controller).
    DiscoveryLogChanged,
    /// Anything else, as reported.
    Other {
        event_type: u8,
        info: u8,
        log_page: u8,
    },
}

impl Controller {
    /// Enables the notices in `mask` (Asynchronous Event Configuration bits, e.g.
    /// `aen_cfg::NS_ATTR`) and submits the first Asynchronous Event Request.
    pub fn enable_events(&self, mask: u32) -> Result<(), Error> {
        let c = self.admin_execute(
            command::set_features(fid::ASYNC_EVENT_CONFIG, Nsid::NONE, mask, false),
            None,
            DataDir::None,
        )?;
        check_status("Set Features (Asynchronous Event Configuration)", c.status)?;
        self.submit_aer()
    }

    fn submit_aer(&self) -> Result<(), Error> {
        let mut admin = self.admin.lock();
        admin.submit(command::async_event_request(), None, DataDir::None, AER_TAG)?;
        admin.flush()
    }

    /// The events reported since the last call (none: an empty list; never blocks on
    /// the target beyond the log page reads). An `Err` means the admin queue broke.
    pub fn poll_events(&self) -> Result<Vec<AsyncEvent>, Error> {
        let mut got: Vec<Completion> = Vec::new();
        self.admin.lock().poll(&mut got)?;
        let mut out = Vec::new();
        for c in got {
            if c.tag != AER_TAG {
                debug!(cid = %c.cid.0, "admin completion nobody waits for, dropped");
                continue;
            }
            if !c.status.is_success() {
                // Aborted at shutdown, or the limit exceeded: no more events from
                // this controller, which the caller sees as no events.
                warn!(status = %c.status, "Asynchronous Event Request ended; events stop");
                continue;
            }
            out.push(self.decode_event(c.dw0)?);
            self.submit_aer()?;
        }
        Ok(out)
    }

    /// Turns an AER result into an event, reading (and so clearing) its log page.
    fn decode_event(&self, dw0: u32) -> Result<AsyncEvent, Error> {
        let (event_type, info, log_page) = aer_result_parts(dw0);
        debug!(event_type, info, log_page, "asynchronous event");
        if event_type != aer_type::NOTICE {
            return Ok(AsyncEvent::Other {
                event_type,
                info,
                log_page,
            });
        }
        let ev = match info {
            aer_notice::NS_ATTR_CHANGED => {
                let log = self.get_log_page(lid::CHANGED_NS, Nsid::NONE, CHANGED_NS_LOG_LEN, 0)?;
                AsyncEvent::NamespacesChanged(parse_changed_ns(&log))
            }
            aer_notice::ANA_CHANGE => {
                self.get_log_page(lid::ANA, Nsid::NONE, ANA_LOG_HEADER_LEN, 0)?;
                AsyncEvent::AnaChanged
            }
            aer_notice::DISCOVERY_LOG_CHANGE => {
                self.get_log_page(lid::DISCOVERY, Nsid::NONE, DISCOVERY_LOG_HEADER_LEN, 0)?;
                AsyncEvent::DiscoveryLogChanged
            }
            _ => AsyncEvent::Other {
                event_type,
                info,
                log_page,
            },
        };
        Ok(ev)
    }
}

/// The Changed Namespace List: NSIDs up to the first zero; `None` when it overflowed.
fn parse_changed_ns(log: &[u8]) -> Option<Vec<Nsid>> {
    let mut out = Vec::new();
    for chunk in log.chunks_exact(NSID_LEN) {
        let id = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        if id == CHANGED_NS_OVERFLOW && out.is_empty() {
            return None;
        }
        if id == 0 {
            break;
        }
        out.push(Nsid(id));
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(ids: &[u32]) -> Vec<u8> {
        let mut v = vec![0u8; CHANGED_NS_LOG_LEN];
        for (i, id) in ids.iter().enumerate() {
            v[i * 4..i * 4 + 4].copy_from_slice(&id.to_le_bytes());
        }
        v
    }

    #[test]
    fn changed_namespace_list() {
        assert_eq!(parse_changed_ns(&log(&[])), Some(vec![]));
        assert_eq!(
            parse_changed_ns(&log(&[3, 7])),
            Some(vec![Nsid(3), Nsid(7)])
        );
        assert_eq!(parse_changed_ns(&log(&[CHANGED_NS_OVERFLOW])), None);
        // A short log (a target that returned less) ends the list where it ends.
        assert_eq!(parse_changed_ns(&[5, 0, 0, 0, 9]), Some(vec![Nsid(5)]));
    }
}
