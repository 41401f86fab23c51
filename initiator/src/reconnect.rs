//! Reconnect after a lost connection, like the Linux host's `--reconnect-delay` and
//! `--ctrl-loss-tmo`.
//!
//! A [`Session`] owns a controller and the means to make it again. When a command fails
//! because the association is gone (transport error, timeout, a dead keep-alive), the
//! session tears the controller down and reconnects: the first attempt at once, then
//! after `reconnect_delay`, doubling up to [`MAX_RECONNECT_DELAY`], until
//! `ctrl_loss_tmo` has passed since the loss (then every later call fails at once, as
//! the kernel removes the controller). The failed work is then retried on the new
//! controller ([`RetryPolicy::Retry`]) or reported ([`RetryPolicy::Fail`]): nothing
//! waits forever, every wait is bounded by the command timeout or `ctrl_loss_tmo`.
//!
//! With several paths to the subsystem ([`Session::with_paths`]: other addresses or
//! target nodes), a lost controller is replaced through the next path that serves the
//! namespaces (failover): each path is tried in turn, first for one whose ANA groups
//! are all optimized, then for one that is at least non-optimized, and the rounds
//! back off as above until `ctrl_loss_tmo`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{info, warn};

use crate::controller::{ConnectOptions, Controller};
use crate::error::Error;
use crate::multipath::PathState;
use crate::transport::Fabric;

/// The Linux host's default `reconnect_delay` (seconds).
pub const DEFAULT_RECONNECT_DELAY: Duration = Duration::from_secs(10);
/// The Linux host's default `ctrl_loss_tmo` (seconds).
pub const DEFAULT_CTRL_LOSS_TMO: Duration = Duration::from_secs(600);
/// Back-off never waits longer than this between attempts.
pub const MAX_RECONNECT_DELAY: Duration = Duration::from_secs(60);

/// What happens to work that failed because the connection was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryPolicy {
    /// Run it again once the controller is back (reads, idempotent writes).
    Retry,
    /// Report the failure; the controller is still brought back for later work.
    Fail,
}

/// When and for how long to reconnect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReconnectPolicy {
    /// Wait before the second attempt; doubles per attempt up to [`MAX_RECONNECT_DELAY`].
    pub reconnect_delay: Duration,
    /// Give up this long after the loss; `None` reconnects forever (`-1` in nvme-cli).
    pub ctrl_loss_tmo: Option<Duration>,
    pub retry: RetryPolicy,
}

impl Default for ReconnectPolicy {
    fn default() -> Self {
        ReconnectPolicy {
            reconnect_delay: DEFAULT_RECONNECT_DELAY,
            ctrl_loss_tmo: Some(DEFAULT_CTRL_LOSS_TMO),
            retry: RetryPolicy::Retry,
        }
    }
}

impl ReconnectPolicy {
    /// From nvme-cli style seconds: `ctrl_loss_tmo` < 0 means forever.
    pub fn from_secs(reconnect_delay: u64, ctrl_loss_tmo: i64, retry: RetryPolicy) -> Self {
        ReconnectPolicy {
            reconnect_delay: Duration::from_secs(reconnect_delay),
            ctrl_loss_tmo: u64::try_from(ctrl_loss_tmo).ok().map(Duration::from_secs),
            retry,
        }
    }
}

/// Connects, retrying per `policy` while the target cannot be reached. The loss clock
/// starts now. Errors that a retry cannot fix (the target refused the host, a bad
/// argument) end it at once.
pub fn connect_with_retry(
    fabric: &Arc<dyn Fabric>,
    opts: &ConnectOptions,
    policy: &ReconnectPolicy,
) -> Result<Controller, Error> {
    let lost_at = Instant::now();
    let mut delay = policy.reconnect_delay;
    let mut attempt = 1u32;
    loop {
        match Controller::connect(fabric.clone(), opts.clone()) {
            Ok(c) => {
                if attempt > 1 {
                    info!(attempt, subnqn = %opts.subnqn, "reconnected");
                }
                return Ok(c);
            }
            Err(e) if !retryable(&e) => return Err(e),
            Err(e) => {
                let elapsed = lost_at.elapsed();
                let left = policy.ctrl_loss_tmo.map(|t| t.saturating_sub(elapsed));
                if left.is_some_and(|l| l.is_zero()) {
                    warn!(attempt, subnqn = %opts.subnqn, "ctrl_loss_tmo expired: {e}");
                    return Err(Error::Timeout(format!(
                        "controller lost for {} ms (ctrl-loss-tmo); last error: {e}",
                        elapsed.as_millis()
                    )));
                }
                let wait = left.map_or(delay, |l| l.min(delay));
                warn!(attempt, subnqn = %opts.subnqn, retry_in_ms = wait.as_millis() as u64, "connect failed: {e}");
                std::thread::sleep(wait);
                delay = (delay * 2).min(MAX_RECONNECT_DELAY);
                attempt += 1;
            }
        }
    }
}

/// Whether reconnecting may help: the connection or target was unreachable or went
/// away. An NVMe status (Connect Invalid Host, ...) is the target's answer: final.
pub(crate) fn retryable(e: &Error) -> bool {
    e.is_fatal() || matches!(e, Error::Io(_))
}

/// A controller that comes back after a lost connection.
pub struct Session {
    /// Every path to the subsystem; `current` is the one the controller uses.
    paths: Vec<Arc<dyn Fabric>>,
    current: usize,
    opts: ConnectOptions,
    policy: ReconnectPolicy,
    ctrl: Option<Controller>,
    /// When the controller was lost and not yet recovered.
    lost_at: Option<Instant>,
    reconnects: u32,
}

impl Session {
    /// Connects (retrying per `policy`).
    pub fn connect(
        fabric: Arc<dyn Fabric>,
        opts: ConnectOptions,
        policy: ReconnectPolicy,
    ) -> Result<Session, Error> {
        let ctrl = connect_with_retry(&fabric, &opts, &policy)?;
        Ok(Session {
            paths: vec![fabric],
            current: 0,
            opts,
            policy,
            ctrl: Some(ctrl),
            lost_at: None,
            reconnects: 0,
        })
    }

    /// Connects once, as `nvme connect` does: `ctrl_loss_tmo` and the back-off apply
    /// to a connection that was established and then lost, not to the first attempt.
    pub fn connect_once(
        fabric: Arc<dyn Fabric>,
        opts: ConnectOptions,
        policy: ReconnectPolicy,
    ) -> Result<Session, Error> {
        let ctrl = Controller::connect(fabric.clone(), opts.clone())?;
        Ok(Session {
            paths: vec![fabric],
            current: 0,
            opts,
            policy,
            ctrl: Some(ctrl),
            lost_at: None,
            reconnects: 0,
        })
    }

    /// Adds other paths to the same subsystem, used when the current one is lost.
    pub fn with_paths(mut self, more: Vec<Arc<dyn Fabric>>) -> Session {
        self.paths.extend(more);
        self
    }

    /// Which path (index in connection order) the controller uses.
    pub fn current_path(&self) -> usize {
        self.current
    }

    /// The reconnect policy.
    pub fn policy(&self) -> &ReconnectPolicy {
        &self.policy
    }

    /// Gives the controller up as lost (a queue of it broke) and reconnects per the
    /// policy: the old association is dropped first, so the target tears it down.
    pub fn reconnect(&mut self) -> Result<&mut Controller, Error> {
        if let Some(old) = self.ctrl.take() {
            warn!(subnqn = %self.opts.subnqn, cntlid = %old.cntlid(), "controller lost: reconnecting");
        }
        self.lost_at.get_or_insert_with(Instant::now);
        self.controller()
    }

    /// How many times the controller was re-established.
    pub fn reconnects(&self) -> u32 {
        self.reconnects
    }

    /// Runs `work` on the controller. If it fails because the association is gone,
    /// reconnects and, under [`RetryPolicy::Retry`], runs it again (until
    /// `ctrl_loss_tmo` has passed since the loss).
    pub fn run<R>(
        &mut self,
        mut work: impl FnMut(&mut Controller) -> Result<R, Error>,
    ) -> Result<R, Error> {
        loop {
            let ctrl = self.controller()?;
            let r = work(ctrl);
            match r {
                Err(e) if retryable(&e) || !ctrl.is_alive() => {
                    warn!(subnqn = %self.opts.subnqn, "controller lost: {e}");
                    self.ctrl = None;
                    self.lost_at.get_or_insert_with(Instant::now);
                    if self.policy.retry == RetryPolicy::Fail {
                        // Bring it back for later work, but report this failure.
                        let _ = self.controller();
                        return Err(e);
                    }
                }
                other => {
                    self.lost_at = None;
                    return other;
                }
            }
        }
    }

    /// The live controller, reconnecting if it was lost.
    pub fn controller(&mut self) -> Result<&mut Controller, Error> {
        if self.ctrl.as_ref().is_some_and(|c| !c.is_alive()) {
            self.ctrl = None;
            self.lost_at.get_or_insert_with(Instant::now);
        }
        if self.ctrl.is_none() {
            let mut policy = self.policy;
            if let (Some(tmo), Some(lost)) = (policy.ctrl_loss_tmo, self.lost_at) {
                policy.ctrl_loss_tmo = Some(tmo.saturating_sub(lost.elapsed()));
                if policy.ctrl_loss_tmo.is_some_and(|t| t.is_zero()) {
                    return Err(Error::Timeout(format!(
                        "controller for {} lost longer than ctrl-loss-tmo",
                        self.opts.subnqn
                    )));
                }
            }
            let c = if self.paths.len() > 1 {
                let (i, c) = failover(&self.paths, self.current, &self.opts, &policy)?;
                self.current = i;
                c
            } else {
                let fabric = self
                    .paths
                    .get(self.current)
                    .ok_or_else(|| Error::Protocol("no path".into()))?;
                connect_with_retry(fabric, &self.opts, &policy)?
            };
            self.reconnects += 1;
            self.lost_at = None;
            self.ctrl = Some(c);
        }
        self.ctrl
            .as_mut()
            .ok_or_else(|| Error::Protocol("no controller".into()))
    }

    /// The current controller, without the means to reconnect it (for users that
    /// cannot hand their queues back, such as ublk).
    pub fn into_controller(mut self) -> Result<Controller, Error> {
        self.controller()?;
        self.ctrl
            .take()
            .ok_or_else(|| Error::Protocol("no controller".into()))
    }

    /// Orderly shutdown of the current controller, if any.
    pub fn shutdown(mut self) -> Result<(), Error> {
        match self.ctrl.take() {
            Some(c) => c.shutdown(),
            None => Ok(()),
        }
    }
}

/// How usable a path's controller is for I/O, from its ANA log page: the worst state
/// of the groups that hold namespaces (a log that cannot be read: unusable).
pub fn path_state(c: &Controller) -> PathState {
    use nvmf_common::wire::ana::{decode_log, AnaState};
    use nvmf_common::wire::identify::cmic;
    if c.id_ctrl().cmic & cmic::ANA == 0 {
        return PathState::Optimized;
    }
    let log = c.get_log_page(
        nvmf_common::wire::log::lid::ANA,
        nvmf_common::types::Nsid::NONE,
        ANA_LOG_PROBE_LEN,
        0,
    );
    let Some((_, groups)) = log.ok().and_then(|p| decode_log(&p)) else {
        return PathState::Unusable;
    };
    let mut state = PathState::Optimized;
    for g in groups.iter().filter(|g| !g.nsids.is_empty()) {
        state = state.min(match g.state {
            AnaState::Optimized => PathState::Optimized,
            AnaState::NonOptimized => PathState::NonOptimized,
            _ => PathState::Unusable,
        });
    }
    state
}

/// Bytes of the ANA log page read to judge a path (a few groups and namespaces).
const ANA_LOG_PROBE_LEN: usize = 4096;

/// Connects through the paths after `lost` in turn, preferring one whose groups are all
/// optimized, then one that is at least non-optimized; rounds back off per `policy`.
fn failover(
    paths: &[Arc<dyn Fabric>],
    lost: usize,
    opts: &ConnectOptions,
    policy: &ReconnectPolicy,
) -> Result<(usize, Controller), Error> {
    let started = Instant::now();
    let mut delay = policy.reconnect_delay;
    let n = paths.len();
    let mut last: Option<Error> = None;
    loop {
        let mut fallback: Option<(usize, Controller)> = None;
        for k in 1..=n {
            let i = (lost + k) % n;
            let Some(fabric) = paths.get(i) else { continue };
            match Controller::connect(fabric.clone(), opts.clone()) {
                Ok(c) => match path_state(&c) {
                    PathState::Optimized => {
                        info!(path = i, subnqn = %opts.subnqn, "failed over to an optimized path");
                        return Ok((i, c));
                    }
                    PathState::NonOptimized if fallback.is_none() => fallback = Some((i, c)),
                    _ => {
                        let _ = c.shutdown();
                    }
                },
                Err(e) if !retryable(&e) => return Err(e),
                Err(e) => {
                    warn!(path = i, subnqn = %opts.subnqn, "path unreachable: {e}");
                    last = Some(e);
                }
            }
        }
        if let Some((i, c)) = fallback {
            info!(path = i, subnqn = %opts.subnqn, "failed over to a non-optimized path");
            return Ok((i, c));
        }
        let left = policy
            .ctrl_loss_tmo
            .map(|t| t.saturating_sub(started.elapsed()));
        if left.is_some_and(|l| l.is_zero()) {
            return Err(Error::Timeout(format!(
                "no usable path to {} within ctrl-loss-tmo; last error: {}",
                opts.subnqn,
                last.map_or("every path refuses I/O (ANA)".to_string(), |e| e
                    .to_string())
            )));
        }
        std::thread::sleep(left.map_or(delay, |l| l.min(delay)));
        delay = (delay * 2).min(MAX_RECONNECT_DELAY);
    }
}
