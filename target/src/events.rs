//! What happened on the target, for subscribers (the management API's `WatchEvents`):
//! namespaces added, removed or resized, hosts connecting and disconnecting, ANA
//! state changes, authentication failures.
//!
//! Ownership: [`EventBus`] lives in [`crate::target::Target`]; whoever makes a thing
//! happen emits its event once it has happened (the control plane for namespace
//! and ANA changes, the fabrics code for connects and authentication, the
//! controller's teardown for disconnects). Emitting never blocks and costs a lock
//! only while somebody subscribes; poll-group threads may emit (connects and
//! disconnects are not on the I/O path). Subscribers that fall behind by more than
//! [`EVENT_BUFFER`] events lose the oldest ones and are told how many.

use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;

use crate::config::AnaState;

/// Events kept for a subscriber that has not read them yet.
pub const EVENT_BUFFER: usize = 1024;

/// How a namespace changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NamespaceChange {
    Added,
    Removed,
    Resized,
    /// Reopened with other settings (backing, identity kept).
    Reconfigured,
}

/// One event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "kebab-case")]
pub enum TargetEvent {
    NamespaceChanged {
        subsystem: String,
        nsid: u32,
        change: NamespaceChange,
    },
    HostConnected {
        subsystem: String,
        host: String,
        cntlid: u16,
        portid: u16,
    },
    HostDisconnected {
        subsystem: String,
        host: String,
        cntlid: u16,
        portid: u16,
    },
    AnaChanged {
        portid: u16,
        grpid: u32,
        state: AnaState,
    },
    AuthenticationFailed {
        subsystem: String,
        host: String,
        portid: u16,
    },
}

/// An event and when it happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stamped {
    pub time: SystemTime,
    pub event: TargetEvent,
}

/// The target's event fan-out. A clone is a handle on the same bus (a controller
/// keeps one to announce its own end).
#[derive(Clone)]
pub struct EventBus {
    tx: broadcast::Sender<Stamped>,
}

impl Default for EventBus {
    fn default() -> Self {
        EventBus {
            tx: broadcast::channel(EVENT_BUFFER).0,
        }
    }
}

impl EventBus {
    /// Publishes `event` to every subscriber (none: dropped at once).
    pub fn emit(&self, event: TargetEvent) {
        if self.tx.receiver_count() == 0 {
            return;
        }
        // An error only means every subscriber went away meanwhile.
        let _ = self.tx.send(Stamped {
            time: SystemTime::now(),
            event,
        });
    }

    /// Events from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Stamped> {
        self.tx.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscribers_see_events_from_their_subscription_on() {
        let bus = EventBus::default();
        bus.emit(TargetEvent::AnaChanged {
            portid: 1,
            grpid: 1,
            state: AnaState::Inaccessible,
        });
        let mut rx = bus.subscribe();
        let e = TargetEvent::NamespaceChanged {
            subsystem: "nqn.2024-01.io.example:a".into(),
            nsid: 2,
            change: NamespaceChange::Added,
        };
        bus.emit(e.clone());
        assert_eq!(rx.try_recv().map(|s| s.event), Ok(e));
        assert!(rx.try_recv().is_err());
    }

    #[test]
    fn a_slow_subscriber_is_told_how_many_it_lost() {
        let bus = EventBus::default();
        let mut rx = bus.subscribe();
        for nsid in 0..(EVENT_BUFFER as u32 + 10) {
            bus.emit(TargetEvent::NamespaceChanged {
                subsystem: "s".into(),
                nsid,
                change: NamespaceChange::Removed,
            });
        }
        assert_eq!(
            rx.try_recv(),
            Err(broadcast::error::TryRecvError::Lagged(10))
        );
        assert!(rx.try_recv().is_ok());
    }
}
