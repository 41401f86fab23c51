//! `--ctrl-loss-tmo` and `--reconnect-delay` (nvme-cli's names and the kernel host's
//! defaults) → a [`ReconnectPolicy`], and the session `perf` and `map` run on.
//!
//! Owned by the CLI. As with `nvme connect`, the first connect is one attempt; the
//! back-off and `ctrl_loss_tmo` apply once an established connection is lost. Work
//! interrupted by the loss is retried on the reconnected controller; past
//! `ctrl_loss_tmo` it fails. `--ctrl-loss-tmo 0` turns reconnecting off (a lost
//! connection fails what was in flight at once).

use std::sync::Arc;

use nvmf_initiator::controller::ConnectOptions;
use nvmf_initiator::reconnect::{ReconnectPolicy, RetryPolicy, Session};
use nvmf_initiator::transport::Fabric;

use super::CliError;

/// The kernel host's default `ctrl_loss_tmo` in seconds (`NVMF_DEF_CTRL_LOSS_TMO`).
pub const DEFAULT_CTRL_LOSS_TMO_SECS: i64 = 600;
/// The kernel host's default `reconnect_delay` in seconds (`NVMF_DEF_RECONNECT_DELAY`).
pub const DEFAULT_RECONNECT_DELAY_SECS: u64 = 10;

/// The reconnect policy of `--ctrl-loss-tmo SECS` (negative: forever) and
/// `--reconnect-delay SECS`; `None` when reconnecting is off (`--ctrl-loss-tmo 0`).
pub fn policy(
    ctrl_loss_tmo: i64,
    reconnect_delay: u64,
) -> Result<Option<ReconnectPolicy>, CliError> {
    if reconnect_delay == 0 {
        return Err(CliError::Usage(
            "--reconnect-delay must be at least 1 second".into(),
        ));
    }
    if ctrl_loss_tmo == 0 {
        return Ok(None);
    }
    Ok(Some(ReconnectPolicy::from_secs(
        reconnect_delay,
        ctrl_loss_tmo,
        RetryPolicy::Retry,
    )))
}

/// `--fast-io-fail-tmo SECS`: `None` when negative (off, nvme-cli's default).
pub fn fast_io_fail(secs: i64) -> Option<std::time::Duration> {
    u64::try_from(secs).ok().map(std::time::Duration::from_secs)
}

/// Connects once; the session reconnects per `policy` after a loss (with
/// `--ctrl-loss-tmo 0` a zero loss timeout: the first failed attempt is final).
pub fn connect(
    fabric: Arc<dyn Fabric>,
    opts: ConnectOptions,
    policy: Option<ReconnectPolicy>,
) -> Result<Session, CliError> {
    let p = policy.unwrap_or_else(|| ReconnectPolicy::from_secs(1, 0, RetryPolicy::Fail));
    Ok(Session::connect_once(fabric, opts, p)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn flags_map_to_the_kernel_semantics() {
        let p = policy(DEFAULT_CTRL_LOSS_TMO_SECS, DEFAULT_RECONNECT_DELAY_SECS)
            .unwrap()
            .unwrap();
        assert_eq!(p.ctrl_loss_tmo, Some(Duration::from_secs(600)));
        assert_eq!(p.reconnect_delay, Duration::from_secs(10));
        assert_eq!(p.retry, RetryPolicy::Retry);
        let forever = policy(-1, 2).unwrap().unwrap();
        assert_eq!(forever.ctrl_loss_tmo, None);
        assert!(policy(0, 10).unwrap().is_none(), "0: no reconnect");
        assert!(matches!(policy(600, 0), Err(CliError::Usage(_))));
    }
}
