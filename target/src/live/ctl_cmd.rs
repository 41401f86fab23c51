//! `nvmf-target ctl`'s subcommands: what each sends, and how its answer is printed.
//!
//! Owned by the `ctl` client side: the top of it, using [`super::endpoint`] to reach
//! the target and [`super::top`] for the live view.

use super::ctl::Request;
use super::endpoint::Endpoint;
use super::Op;

/// `nvmf-target ctl` subcommands: every change, then the queries.
// Parsed once per `ctl` run: its size does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(clap::Subcommand, Debug, Clone)]
pub enum CtlCommand {
    #[command(flatten)]
    Change(Op),
    /// Re-read the configuration file (as SIGHUP does).
    Reload,
    /// Print the running configuration as YAML that starts the same target (what a
    /// live change writes into the configuration file).
    Export,
    /// Show ports, subsystems, namespaces, connected hosts and queue counts.
    Status {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Live view per poll group, subsystem, namespace and host: IOPS, bandwidth,
    /// latency, queue depth, poll-group CPU. A full-screen view on a terminal (q or
    /// Ctrl-C quits); plain-text snapshots otherwise.
    ///
    /// Examples:
    ///   nvmf-target ctl top
    ///   nvmf-target ctl top --interval 2 --iterations 5 > top.txt
    Top(super::top::TopArgs),
}

impl CtlCommand {
    pub fn request(&self) -> Request {
        match self.clone() {
            CtlCommand::Change(op) => Request::Change(op.with_absolute_paths()),
            CtlCommand::Reload => Request::Reload,
            CtlCommand::Export => Request::Export,
            CtlCommand::Status { .. } => Request::Status,
            CtlCommand::Top(_) => Request::Metrics,
        }
    }
}

/// Runs `cmd` against `target`, prints the outcome; returns whether it succeeded.
pub fn run_client(target: &mut Endpoint, cmd: &CtlCommand) -> bool {
    if let CtlCommand::Top(args) = cmd {
        return match super::top::run(target, args) {
            Ok(()) => true,
            Err(e) => {
                eprintln!("nvmf-target: {e}");
                false
            }
        };
    }
    match target.request(&cmd.request()) {
        Ok(resp) if resp.ok => {
            match (&resp.status, cmd) {
                (Some(s), CtlCommand::Status { json: true }) => {
                    match serde_json::to_string_pretty(s) {
                        Ok(j) => out(&format!("{j}\n")),
                        Err(e) => eprintln!("{e}"),
                    }
                }
                (Some(s), _) => out(&s.to_string()),
                (None, _) if resp.config.is_some() => {
                    out(resp.config.as_deref().unwrap_or_default());
                }
                (None, _) if resp.changes.is_empty() => out("no change\n"),
                (None, _) => {
                    for c in &resp.changes {
                        out(&format!("{c}\n"));
                    }
                }
            }
            true
        }
        Ok(resp) => {
            eprintln!(
                "nvmf-target: refused: {}",
                resp.error.as_deref().unwrap_or("no reason given")
            );
            false
        }
        Err(e) => {
            eprintln!("nvmf-target: {e}");
            false
        }
    }
}

/// Writes `text` to standard output. A reader that went away (`ctl status | head`) is
/// not an error of ours: the rest is dropped quietly instead of a panic on EPIPE.
fn out(text: &str) {
    use std::io::Write;
    let mut o = std::io::stdout().lock();
    let _ = o.write_all(text.as_bytes()).and_then(|()| o.flush());
}
