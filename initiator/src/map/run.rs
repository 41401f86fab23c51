//! One namespace served from a [`Session`] until stopped: the whole life of a mapping.
//!
//! Owned by `map`; the `map` command runs one, the mapping daemon one per namespace.
//! Order: the export is computed from the controller, the I/O queues are handed to
//! the workers (worker `i` drives queue `i`; after a lost connection it takes queue `i`
//! of the reconnected controller when `recover` is set), the caller hears where the
//! namespace is ([`Ready`]), the server runs until the [`Stopper`] fires or a queue
//! fails for good, then the controller is shut down (Disconnect, CC.SHN).

use std::sync::Arc;

use crate::error::Error;
use crate::reconnect::Session;
use crate::requeue::{Requeue, SharedSession};

use super::{export_for, serve_recovering, ublk, Listener, MapOptions, MapStats, Stopper};

/// Where the namespace is served.
pub enum Endpoint<'a> {
    /// NBD on a bound listener.
    Nbd(&'a Listener),
    /// A ublk block device.
    Ublk,
}

/// What a mapping reports once clients may use it.
#[derive(Debug, Clone)]
pub struct Ready {
    pub subnqn: String,
    pub size_bytes: u64,
    pub block_size: u32,
    /// `nbd+unix:///...` / `nbd://...` or `/dev/ublkbN`.
    pub device: String,
    pub queues: usize,
    pub depth: usize,
}

/// What a finished mapping did.
#[derive(Debug, Clone, Copy, Default)]
pub struct Served {
    pub stats: MapStats,
    pub reconnects: u32,
}

/// Serves `o.nsid` of `session`'s controller at `endpoint` until `stop`; `ready` is
/// called once, when clients may connect. The controller is shut down on the way out.
pub fn serve_session(
    mut session: Session,
    endpoint: Endpoint<'_>,
    o: &MapOptions,
    recover: bool,
    stop: &Stopper,
    ready: impl FnOnce(&Ready) + Send + Sync + 'static,
) -> Result<Served, Error> {
    let ctrl = session.controller()?;
    let ns = ctrl.namespace(o.nsid)?.clone();
    let subnqn = ctrl.id_ctrl().subnqn.clone();
    let export = export_for(ctrl, o)?;
    let fabric = ctrl.fabric().clone();
    let (shared, mut queues) = SharedSession::new(session)?;
    let shared = shared.with_fast_io_fail(o.fast_io_fail);
    let shared = Arc::new(shared);
    let mut info = Ready {
        subnqn,
        size_bytes: ns.size_bytes(),
        block_size: ns.block_size,
        device: String::new(),
        queues: queues.len(),
        depth: 0,
    };
    let served = match endpoint {
        Endpoint::Nbd(listener) => {
            info.device = listener.local()?.uri(&o.export_name);
            info.depth = queues
                .iter()
                .map(|q| q.capacity())
                .min()
                .unwrap_or(0)
                .min(o.depth.unwrap_or(usize::MAX));
            ready(&info);
            let requeue = recover.then_some(shared.as_ref() as &dyn Requeue);
            serve_recovering(export, &fabric, &mut queues, listener, o, stop, requeue)
        }
        Endpoint::Ublk => {
            let requeue = recover.then(|| shared.clone() as Arc<dyn Requeue + Send + Sync>);
            ublk::serve_ublk(
                export,
                &fabric,
                std::mem::take(&mut queues),
                o,
                stop,
                requeue,
                move |bdev, nrq, depth| {
                    info.device = bdev.to_owned();
                    info.queues = usize::from(nrq);
                    info.depth = usize::from(depth);
                    ready(&info);
                },
            )
        }
    };
    drop(queues);
    let reconnects = shared.reconnects();
    // The ublk server's threads hold the other references until it returns.
    let shut = match Arc::try_unwrap(shared) {
        Ok(s) => s.into_session().and_then(Session::shutdown),
        Err(_) => Ok(()),
    };
    let stats = served?;
    shut?;
    Ok(Served { stats, reconnects })
}
