//! Where `nvmf-target ctl` sends its requests: the local admin socket
//! ([`super::ctl::request`]) or a remote target's management API.
//!
//! Owned by the `ctl` client side; above the socket protocol ([`super::ctl`]) and the
//! API client ([`crate::management::client`]), below the commands that use it
//! ([`super::ctl_cmd`], [`super::top`]).

use std::path::{Path, PathBuf};

use super::ctl::{request, Request, Response};

/// Where `ctl` sends its requests: the local admin socket or a remote target's
/// management API (`--server`).
pub enum Endpoint {
    Socket(PathBuf),
    Remote(Box<crate::management::client::Remote>),
}

impl Endpoint {
    /// The socket at `socket`, or the API when `remote.server` is set (connected now).
    pub fn new(
        socket: &Path,
        remote: &crate::management::client::RemoteArgs,
    ) -> Result<Endpoint, String> {
        match remote.server {
            Some(_) => Ok(Endpoint::Remote(Box::new(
                crate::management::client::Remote::connect(remote)?,
            ))),
            None => Ok(Endpoint::Socket(socket.to_path_buf())),
        }
    }

    /// Sends one request and returns the answer.
    pub fn request(&mut self, req: &Request) -> Result<Response, String> {
        match self {
            Endpoint::Socket(path) => request(path, req),
            Endpoint::Remote(r) => r.request(req),
        }
    }
}
