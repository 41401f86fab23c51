//! `nvmf-target ctl --server HOST:PORT`: the same subcommands and output as over the
//! admin socket, through the management API. Each [`Request`] of the socket maps to
//! one call; the answer is turned back into the socket's [`Response`], so `ctl`'s
//! printing (and `ctl top`) is one code path for both.

use std::path::PathBuf;

use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};

use super::convert::{self, Call};
use super::proto as pb;
use super::proto::management_client::ManagementClient;
use crate::live::ctl::{Request, Response};

/// How to reach and authenticate to a remote target.
#[derive(clap::Args, Debug, Clone)]
pub struct RemoteArgs {
    /// Use the management API at HOST:PORT (gRPC, mutual TLS) instead of the socket.
    #[arg(long, value_name = "HOST:PORT", requires_all = ["cert", "key", "ca"])]
    pub server: Option<String>,
    /// The client certificate (PEM).
    #[arg(long, value_name = "FILE")]
    pub cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long, value_name = "FILE")]
    pub key: Option<PathBuf>,
    /// The CA that signed the server's certificate (PEM).
    #[arg(long, value_name = "FILE")]
    pub ca: Option<PathBuf>,
    /// The name the server's certificate must carry (default: HOST of --server).
    #[arg(long, value_name = "NAME")]
    pub server_name: Option<String>,
}

/// A connection to a remote target's management API.
pub struct Remote {
    rt: tokio::runtime::Runtime,
    client: ManagementClient<Channel>,
}

fn read(what: &str, p: &Option<PathBuf>) -> Result<Vec<u8>, String> {
    let p = p
        .as_ref()
        .ok_or_else(|| format!("--{what} is required with --server"))?;
    std::fs::read(p).map_err(|e| format!("--{what} {}: {e}", p.display()))
}

/// HOST of `HOST:PORT` (`[v6]:PORT` too).
fn host_of(server: &str) -> &str {
    let host = server.rsplit_once(':').map_or(server, |(h, _)| h);
    host.trim_start_matches('[').trim_end_matches(']')
}

impl Remote {
    /// Connects (TCP and the TLS handshake) to `args.server`.
    pub fn connect(args: &RemoteArgs) -> Result<Remote, String> {
        let server = args.server.as_deref().ok_or("--server is not set")?;
        let tls = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(read("ca", &args.ca)?))
            .identity(Identity::from_pem(
                read("cert", &args.cert)?,
                read("key", &args.key)?,
            ))
            .domain_name(
                args.server_name
                    .clone()
                    .unwrap_or_else(|| host_of(server).to_string()),
            );
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(|e| e.to_string())?;
        let endpoint = Channel::from_shared(format!("https://{server}"))
            .map_err(|e| format!("--server {server:?}: {e}"))?
            .tls_config(tls)
            .map_err(|e| format!("TLS: {e}"))?
            .connect_timeout(std::time::Duration::from_secs(10));
        let channel = rt
            .block_on(endpoint.connect())
            .map_err(|e| format!("cannot reach the management API at {server}: {}", chain(&e)))?;
        Ok(Remote {
            rt,
            client: ManagementClient::new(channel),
        })
    }

    /// Sends one request; the answer as the admin socket gives it.
    pub fn request(&mut self, req: &Request) -> Result<Response, String> {
        let c = &mut self.client;
        let r: Result<Response, tonic::Status> = self.rt.block_on(async {
            let changed =
                |r: tonic::Response<pb::ChangeReply>| Response::changed(r.into_inner().changes);
            Ok(match req.clone() {
                Request::Reload => changed(c.reload(pb::ReloadRequest {}).await?),
                Request::Export => Response {
                    config: Some(
                        c.export(pb::ExportRequest {})
                            .await?
                            .into_inner()
                            .config_yaml,
                    ),
                    ..Response::changed(Vec::new())
                },
                Request::Status => {
                    let json = c
                        .get_status(pb::GetStatusRequest {})
                        .await?
                        .into_inner()
                        .view_json;
                    Response {
                        status: Some(serde_json::from_str(&json).map_err(malformed)?),
                        ..Response::changed(Vec::new())
                    }
                }
                Request::Metrics => {
                    let json = c
                        .get_metrics(pb::GetMetricsRequest {})
                        .await?
                        .into_inner()
                        .snapshot_json;
                    Response {
                        metrics: Some(serde_json::from_str(&json).map_err(malformed)?),
                        ..Response::changed(Vec::new())
                    }
                }
                Request::Change(op) => changed(match Call::from(op) {
                    Call::AddNamespace(m) => c.add_namespace(m).await?,
                    Call::RemoveNamespace(m) => c.remove_namespace(m).await?,
                    Call::ResizeNamespace(m) => c.resize_namespace(m).await?,
                    Call::AddSubsystem(m) => c.add_subsystem(m).await?,
                    Call::RemoveSubsystem(m) => c.remove_subsystem(m).await?,
                    Call::AddHost(m) => c.add_host(m).await?,
                    Call::RemoveHost(m) => c.remove_host(m).await?,
                    Call::SetHostKey(m) => c.set_host_key(m).await?,
                    Call::AddPort(m) => c.add_port(m).await?,
                    Call::RemovePort(m) => c.remove_port(m).await?,
                    Call::LinkSubsystem(m) => c.link_subsystem(m).await?,
                    Call::UnlinkSubsystem(m) => c.unlink_subsystem(m).await?,
                    Call::SetAnaState(m) => c.set_ana_state(m).await?,
                    Call::AddNamespaceHost(m) => c.add_namespace_host(m).await?,
                    Call::RemoveNamespaceHost(m) => c.remove_namespace_host(m).await?,
                    Call::SetNamespaceQos(m) => c.set_namespace_qos(m).await?,
                }),
            })
        });
        match r {
            Ok(resp) => Ok(resp),
            Err(s) => match convert::refusal_of(s.code()) {
                Some(kind) => Ok(Response {
                    refusal: Some(kind),
                    ..Response::error(s.message().to_string())
                }),
                // Not an answer of the target's: the connection or TLS failed.
                None => {
                    let mut why = s.message().to_string();
                    if let Some(src) = std::error::Error::source(&s) {
                        why = format!("{why}: {}", chain(src));
                    }
                    Err(format!(
                        "management API call failed ({:?}): {why}",
                        s.code()
                    ))
                }
            },
        }
    }
}

fn malformed(e: serde_json::Error) -> tonic::Status {
    tonic::Status::internal(format!("malformed answer from the target: {e}"))
}

/// An error with its causes (tonic's transport errors hide the TLS reason in them).
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}
