//! Recognising this provider's objects behind trait objects.
//!
//! [`QpInit`](crate::QpInit) carries `Arc<dyn ProtectionDomain>` and
//! `Arc<dyn CompletionQueue>`; creating a QP needs the `ibv_pd` and `ibv_cq` behind
//! them. Each live object is entered here under its address (weakly, removed by its
//! `Drop`); a lookup that finds nothing means the object came from another provider.
//! Control path only (QP creation).

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

pub(super) struct Registry<T> {
    map: Mutex<Option<HashMap<usize, Weak<T>>>>,
}

impl<T> Registry<T> {
    pub(super) const fn new() -> Self {
        Registry {
            map: Mutex::new(None),
        }
    }

    pub(super) fn insert(&self, obj: &Arc<T>) {
        let key = Arc::as_ptr(obj).cast::<()>().addr();
        self.map
            .lock()
            .get_or_insert_with(HashMap::new)
            .insert(key, Arc::downgrade(obj));
    }

    pub(super) fn remove(&self, obj: &T) {
        let key = std::ptr::from_ref(obj).cast::<()>().addr();
        if let Some(m) = self.map.lock().as_mut() {
            m.remove(&key);
        }
    }

    /// The concrete object behind `obj`, if this registry holds it.
    pub(super) fn find<U: ?Sized>(&self, obj: &Arc<U>) -> Option<Arc<T>> {
        let ptr = Arc::as_ptr(obj).cast::<()>();
        let found = self.map.lock().as_ref()?.get(&ptr.addr())?.upgrade()?;
        std::ptr::eq(Arc::as_ptr(&found).cast::<()>(), ptr).then_some(found)
    }
}
