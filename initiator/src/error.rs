//! The host library's error type.
//!
//! Owned by the host library (`nvmf-initiator`). Every fallible host operation returns
//! [`Error`]: a transport failure, an NVMe status the target returned (with the name of
//! the command that got it), a protocol violation by the target, a host-side timeout,
//! or bad input from the caller.

use nvmf_common::wire::status::Status;

use crate::transport::TransportError;

/// Errors of the host library.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The fabric failed (connection refused or rejected, queue dead, ...).
    #[error("transport error: {0}")]
    Transport(#[from] TransportError),
    /// The target completed `what` with an error status.
    #[error("{what} failed: {status}")]
    Status { what: String, status: Status },
    /// The target broke the protocol (unknown command id, malformed data, ...).
    #[error("protocol error: {0}")]
    Protocol(String),
    /// A command or a state change did not complete in time.
    #[error("timed out: {0}")]
    Timeout(String),
    /// No free command id: `depth - 1` commands are already outstanding.
    #[error("queue full: no free command identifier")]
    QueueFull,
    /// The caller asked for something impossible (LBA out of range, bad size, ...).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A namespace, subsystem or file that does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// A feature this build or this transport does not provide.
    #[error("not supported: {0}")]
    Unsupported(String),
    /// A local file could not be read or written.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// The path failed the command (a path-related status: ANA inaccessible, persistent
    /// loss or in transition): another path may serve it.
    #[error("path error: {0}")]
    Path(String),
    /// In-band authentication (DH-HMAC-CHAP) failed; the message names what failed.
    #[error("authentication failed: {0}")]
    Auth(String),
    /// Data read back did not match what was written (perf `--verify`).
    #[error("verification failed: {0}")]
    Verify(String),
    /// The controller is still reconnecting and `fast_io_fail_tmo` has passed: I/O
    /// fails now instead of waiting (reconnecting goes on until `ctrl_loss_tmo`).
    #[error("the controller is reconnecting: {0}")]
    Reconnecting(String),
}

impl Error {
    /// The NVMe status behind this error, when the target returned one.
    pub fn status(&self) -> Option<Status> {
        match self {
            Error::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// An [`Error::Status`] for command `what`.
    pub fn nvme(what: impl Into<String>, status: Status) -> Error {
        Error::Status {
            what: what.into(),
            status,
        }
    }

    /// True for errors that mean the queue or connection can no longer be used.
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            Error::Transport(_) | Error::Protocol(_) | Error::Timeout(_) | Error::Path(_)
        )
    }
}

/// `Ok(())` when `status` is success, else an [`Error::Status`] naming `what`.
pub fn check_status(what: &str, status: Status) -> Result<(), Error> {
    if status.is_success() {
        Ok(())
    } else {
        Err(Error::nvme(what, status))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvmf_common::wire::status::{generic, Sct};

    #[test]
    fn status_accessor() {
        let e = Error::nvme("Identify", Status::generic_dnr(generic::INVALID_FIELD));
        let s = e.status();
        assert!(s.is_some_and(|s| s.is(Sct::Generic, generic::INVALID_FIELD)));
        assert!(e.to_string().contains("Identify failed"));
        assert!(Error::QueueFull.status().is_none());
        assert!(check_status("x", Status::SUCCESS).is_ok());
        assert!(check_status("x", Status::generic_dnr(generic::INTERNAL_ERROR)).is_err());
        assert!(Error::Timeout("x".into()).is_fatal());
        assert!(!Error::QueueFull.is_fatal());
    }
}
