//! The keep-alive thread: Keep Alive on the admin queue every interval until stopped.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::Mutex;
use tracing::{trace, warn};

use crate::command;
use crate::error::Error;
use crate::queue::Queue;
use crate::transport::DataDir;

/// The keep-alive thread and how to stop it.
pub(super) struct KeepAlive {
    stop: Option<mpsc::Sender<()>>,
    handle: Option<JoinHandle<()>>,
}

impl KeepAlive {
    pub(super) fn start(
        admin: Arc<Mutex<Queue>>,
        interval: Duration,
        timeout: Duration,
        failed: Arc<AtomicBool>,
    ) -> Result<KeepAlive, Error> {
        let (tx, rx) = mpsc::channel::<()>();
        let handle = std::thread::Builder::new()
            .name("nvmf-keep-alive".into())
            .spawn(move || {
                // A message or a dropped sender both mean stop.
                while let Err(RecvTimeoutError::Timeout) = rx.recv_timeout(interval) {
                    let r =
                        admin
                            .lock()
                            .execute(command::keep_alive(), None, DataDir::None, timeout);
                    match r {
                        Ok(c) if c.status.is_success() => trace!("keep alive ok"),
                        Ok(c) => {
                            warn!(status = %c.status, "Keep Alive failed");
                            failed.store(true, Ordering::Relaxed);
                        }
                        Err(e) => {
                            warn!(error = %e, "Keep Alive failed; stopping keep-alive");
                            failed.store(true, Ordering::Relaxed);
                            break;
                        }
                    }
                }
            })?;
        Ok(KeepAlive {
            stop: Some(tx),
            handle: Some(handle),
        })
    }

    pub(super) fn stop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(h) = self.handle.take() {
            if h.join().is_err() {
                warn!("keep-alive thread panicked");
            }
        }
    }
}

impl Drop for KeepAlive {
    fn drop(&mut self) {
        self.stop();
    }
}
