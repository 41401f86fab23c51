//! Where the NBD server listens: a Unix socket or a TCP address, and the connected
//! stream either one yields.
//!
//! Owned by `map`. A stale Unix socket file (nothing accepts on it) is replaced; a
//! live one is an error, so two servers never share a path. The file is removed when
//! the listener is dropped.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::os::unix::fs::FileTypeExt as _;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// An address to listen on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listen {
    Unix(PathBuf),
    Tcp(SocketAddr),
}

impl std::fmt::Display for Listen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Listen::Unix(p) => write!(f, "unix:{}", p.display()),
            Listen::Tcp(a) => write!(f, "tcp:{a}"),
        }
    }
}

impl Listen {
    /// The address as an NBD URI (`nbd+unix:///NAME?socket=PATH`, `nbd://HOST:PORT/NAME`)
    /// for nbdinfo, qemu-img and friends.
    pub fn uri(&self, export_name: &str) -> String {
        match self {
            Listen::Unix(p) => format!("nbd+unix:///{export_name}?socket={}", p.display()),
            Listen::Tcp(a) => format!("nbd://{a}/{export_name}"),
        }
    }
}

/// A bound listener.
pub enum Listener {
    Unix(UnixListener, PathBuf),
    Tcp(TcpListener),
}

impl Listener {
    pub fn bind(l: &Listen) -> io::Result<Listener> {
        match l {
            Listen::Unix(p) => {
                remove_stale_socket(p)?;
                Ok(Listener::Unix(UnixListener::bind(p)?, p.clone()))
            }
            Listen::Tcp(a) => Ok(Listener::Tcp(TcpListener::bind(a)?)),
        }
    }

    /// The address actually bound (a TCP port 0 becomes the port the kernel chose).
    pub fn local(&self) -> io::Result<Listen> {
        match self {
            Listener::Unix(_, p) => Ok(Listen::Unix(p.clone())),
            Listener::Tcp(t) => Ok(Listen::Tcp(t.local_addr()?)),
        }
    }

    pub fn accept(&self) -> io::Result<Stream> {
        match self {
            Listener::Unix(u, _) => Ok(Stream::Unix(u.accept()?.0)),
            Listener::Tcp(t) => {
                let (s, _) = t.accept()?;
                // Replies are small and latency-bound: no Nagle.
                s.set_nodelay(true)?;
                Ok(Stream::Tcp(s))
            }
        }
    }

    pub fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        match self {
            Listener::Unix(u, _) => u.set_nonblocking(on),
            Listener::Tcp(t) => t.set_nonblocking(on),
        }
    }
}

impl AsFd for Listener {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            Listener::Unix(u, _) => u.as_fd(),
            Listener::Tcp(t) => t.as_fd(),
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Listener::Unix(_, p) = self {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Removes `p` if it is a socket nobody accepts on; errors if it is live or not a
/// socket.
fn remove_stale_socket(p: &Path) -> io::Result<()> {
    let Ok(meta) = std::fs::symlink_metadata(p) else {
        return Ok(());
    };
    if !meta.file_type().is_socket() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{} exists and is not a socket", p.display()),
        ));
    }
    if UnixStream::connect(p).is_ok() {
        return Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!("{} is in use by another server", p.display()),
        ));
    }
    std::fs::remove_file(p)
}

/// One client connection.
pub enum Stream {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Stream {
    pub fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_nonblocking(on),
            Stream::Tcp(s) => s.set_nonblocking(on),
        }
    }

    pub fn set_timeouts(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Unix(s) => {
                s.set_read_timeout(t)?;
                s.set_write_timeout(t)
            }
            Stream::Tcp(s) => {
                s.set_read_timeout(t)?;
                s.set_write_timeout(t)
            }
        }
    }

    /// Closes both directions (the client sees EOF).
    pub fn shutdown(&self) {
        let _ = match self {
            Stream::Unix(s) => s.shutdown(std::net::Shutdown::Both),
            Stream::Tcp(s) => s.shutdown(std::net::Shutdown::Both),
        };
    }
}

impl Read for Stream {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.read(b),
            Stream::Tcp(s) => s.read(b),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.write(b),
            Stream::Tcp(s) => s.write(b),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl AsRawFd for Stream {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Stream::Unix(s) => s.as_raw_fd(),
            Stream::Tcp(s) => s.as_raw_fd(),
        }
    }
}

impl AsFd for Stream {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            Stream::Unix(s) => s.as_fd(),
            Stream::Tcp(s) => s.as_fd(),
        }
    }
}
