//! A subsystem's live controllers as controllers: registering one, looking them up,
//! and what the subsystem tells them when its namespaces change.
//!
//! [`Subsystem`] keeps the registry (ids and weak references, `subsystem.rs`) without
//! naming [`Controller`], which holds its subsystem: this file sits above both, so the
//! two do not import each other. A registered entry is always a `Controller`
//! ([`Subsystem::register_controller`] is the only way in), so the downcast here
//! cannot fail for a live one.

use std::any::Any;
use std::sync::{Arc, Weak};

use nvmf_common::types::{Cntlid, Nqn, Nsid};

use crate::controller::Controller;
use crate::subsystem::Subsystem;

/// A registry entry back as the controller it is.
fn typed(w: &Weak<dyn Any + Send + Sync>) -> Option<Arc<Controller>> {
    w.upgrade()?.downcast::<Controller>().ok()
}

impl Subsystem {
    /// Records a live controller under its id (allocated by [`Subsystem::alloc_cntlid`]).
    pub fn register_controller(&self, ctrl: &Arc<Controller>) {
        let any: Arc<dyn Any + Send + Sync> = ctrl.clone();
        self.ctrls
            .lock()
            .live
            .insert(ctrl.cntlid.0, Arc::downgrade(&any));
    }

    /// Live controllers.
    pub fn controllers(&self) -> Vec<Arc<Controller>> {
        self.ctrls.lock().live.values().filter_map(typed).collect()
    }

    pub fn controller(&self, cntlid: Cntlid) -> Option<Arc<Controller>> {
        self.ctrls.lock().live.get(&cntlid.0).and_then(typed)
    }

    /// Changes which hosts see namespace `nsid`, in place (no reopen, I/O goes on).
    /// Only the controllers whose host gained or lost it get Namespace Attribute
    /// Changed; returns how many. None: no such namespace.
    pub fn set_visibility(&self, nsid: Nsid, auto_visible: bool, hosts: &[Nqn]) -> Option<usize> {
        let ns = self.namespace(nsid)?;
        let before: Vec<(Arc<Controller>, bool)> = self
            .controllers()
            .into_iter()
            .map(|c| {
                let saw = ns.visible_to(&c.hostnqn);
                (c, saw)
            })
            .collect();
        ns.visibility.set(auto_visible, hosts);
        let mut notified = 0;
        for (c, saw) in before {
            if saw != ns.visible_to(&c.hostnqn) {
                c.namespace_changed(nsid);
                notified += 1;
            }
        }
        Some(notified)
    }

    /// Tells the controllers whose host sees namespace `nsid` now, or saw it before
    /// (`saw`), that it changed: a host that never sees it hears nothing.
    pub(crate) fn notify_ns_changed(&self, nsid: Nsid, saw: &dyn Fn(&Nqn) -> bool) {
        let now = self.namespace(nsid);
        for c in self.controllers() {
            let sees = now.as_ref().is_some_and(|n| n.visible_to(&c.hostnqn));
            if sees || saw(&c.hostnqn) {
                c.namespace_changed(nsid);
            }
        }
    }
}
