//! The `Management` service: each call checks the caller's role, turns its request
//! into an [`Op`] or a query and runs it on the control plane. Changes run on
//! tokio's blocking pool: [`Live::execute`] plans, writes the configuration file
//! (fsync) and applies, serialized by the running configuration's lock.

use std::pin::Pin;
use std::sync::Arc;

use openssl::nid::Nid;
use openssl::x509::X509;
use tokio::sync::{broadcast, mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};
use tracing::{info, warn};

use crate::config::ManagementRole;

use super::convert;
use super::proto as pb;
use super::proto::management_server::Management;
use crate::live::{Live, Op};

/// Events queued for one stream before the forwarder waits for the client.
const STREAM_QUEUE: usize = 64;

pub struct Service {
    pub(super) live: Arc<Live>,
    /// Flips to true at shutdown: event streams end so the server can stop.
    pub(super) stopping: watch::Receiver<bool>,
}

/// The names a certificate stands for: its subject CNs and DNS subjectAltNames.
fn subject_names(der: &[u8]) -> Vec<String> {
    let Ok(cert) = X509::from_der(der) else {
        return Vec::new();
    };
    let mut names: Vec<String> = cert
        .subject_name()
        .entries_by_nid(Nid::COMMONNAME)
        .filter_map(|e| e.data().to_string().ok())
        .collect();
    if let Some(sans) = cert.subject_alt_names() {
        names.extend(sans.iter().filter_map(|n| n.dnsname().map(str::to_string)));
    }
    names
}

impl Service {
    /// The caller's subject, if its role allows `needed`.
    fn authorize<T>(&self, req: &Request<T>, needed: ManagementRole) -> Result<String, Status> {
        // The TLS layer has checked the chain to the CA and the validity dates.
        let names = req
            .peer_certs()
            .and_then(|certs| certs.first().map(|c| subject_names(c.as_ref())))
            .unwrap_or_default();
        let Some(first) = names.first().cloned() else {
            return Err(Status::unauthenticated(
                "the client certificate names no subject (CN or DNS subjectAltName)",
            ));
        };
        let roles = self.live.management();
        let role = roles
            .as_ref()
            .and_then(|m| m.role_of(names.iter().map(String::as_str)));
        match role {
            Some(r) if r >= needed => Ok(first),
            Some(_) => {
                warn!(client = %first, "management API: a reader asked for a change; refused");
                Err(Status::permission_denied(format!(
                    "{first} is a reader: changes need an admin certificate"
                )))
            }
            None => {
                warn!(client = %first, "management API: a certificate with no role; refused");
                Err(Status::permission_denied(format!(
                    "{first} is in neither management.admins nor management.readers"
                )))
            }
        }
    }

    /// Runs one change for an admin.
    async fn change<T>(
        &self,
        req: Request<T>,
        to_op: impl FnOnce(T) -> Result<Op, Status>,
    ) -> Result<Response<pb::ChangeReply>, Status> {
        let client = self.authorize(&req, ManagementRole::Admin)?;
        let op = to_op(req.into_inner())?;
        let shown =
            crate::live::ctl::loggable(&crate::live::ctl::Request::Change(op.clone())).into_owned();
        info!(%client, req = ?shown, "management API change");
        let live = self.live.clone();
        let r = tokio::task::spawn_blocking(move || live.execute(&op))
            .await
            .map_err(|e| Status::internal(format!("the change did not finish: {e}")))?;
        match r {
            Ok(changes) => Ok(Response::new(pb::ChangeReply { changes })),
            Err(e) => Err(convert::status_of(&e)),
        }
    }

    /// Runs `f` on the blocking pool for a reader (or an admin).
    async fn query<T, R: Send + 'static>(
        &self,
        req: &Request<T>,
        f: impl FnOnce(&Live) -> Result<R, Status> + Send + 'static,
    ) -> Result<Response<R>, Status> {
        self.authorize(req, ManagementRole::Reader)?;
        let live = self.live.clone();
        tokio::task::spawn_blocking(move || f(&live))
            .await
            .map_err(|e| Status::internal(format!("the query did not finish: {e}")))?
            .map(Response::new)
    }
}

type EventStream = Pin<Box<dyn Stream<Item = Result<pb::Event, Status>> + Send>>;

#[tonic::async_trait]
impl Management for Service {
    async fn add_namespace(
        &self,
        r: Request<pb::AddNamespaceRequest>,
    ) -> Result<Response<pb::ChangeReply>, Status> {
        self.change(r, convert::add_namespace).await
    }
    async fn remove_namespace(
        &self,
        r: Request<pb::RemoveNamespaceRequest>,
    ) -> Result<Response<pb::ChangeReply>, Status> {
        self.change(r, convert::remove_namespace).await
    }
    async fn resize_namespace(
        &self,
        r: Request<pb::ResizeNamespaceRequest>,
    ) -> Result<Response<pb::ChangeReply>, Status> {
        self.change(r, convert::resize_namespace).await
    }
    async fn add_namespace_host(
        &self,
        r: Request<pb::NamespaceHostRef>,
    ) -> Result<Response<pb::ChangeReply>, Status> {
        self.change(r, |m| convert::namespace_host(m, true)).await
    }
    async fn remove_namespace_host(
        &self,
        r: Request<pb::NamespaceHostRef>,
    ) -> Result<Response<pb::ChangeReply>, Status> {
        self.change(r, |m| convert::namespace_host(m, false)).await
    }
    async fn add_subsystem(
        &self,
        r: Request<pb::AddSubsystemRequest>,
    ) -> Result<Response<pb::ChangeReply>, Status> {
        self.change(r, convert::add_subsystem).await
    }
    async fn remove_subsystem(
        &self,
        r: Request<pb::SubsystemRef>,
    ) -> Result<Response<pb::ChangeReply>, Status> {
        self.change(r, convert::remove_subsystem).await
    }
    async fn add_host(&self, r: Request<pb::HostRef>) -> Result<Response<pb::ChangeReply>, Status> {
        self.change(r, convert::add_host).await
    }
    async fn remove_host(
        &self,
        r: Request<pb::HostRef>,
    ) -> Result<Response<pb::ChangeReply>, Status> {
        self.change(r, convert::remove_host).await
    }
    async fn set_host_key(
        &self,
        r: Request<pb::SetHostKeyRequest>,
    ) -> Result<Response<pb::ChangeReply>, Status> {
        self.change(r, convert::set_host_key).await
    }
    async fn add_port(
        &self,
        r: Request<pb::AddPortRequest>,
    ) -> Result<Response<pb::ChangeReply>, Status> {
        self.change(r, convert::add_port).await
    }
    async fn remove_port(
        &self,
        r: Request<pb::PortRef>,
    ) -> Result<Response<pb::ChangeReply>, Status> {
        self.change(r, convert::remove_port).await
    }
    async fn link_subsystem(
        &self,
        r: Request<pb::PortLink>,
    ) -> Result<Response<pb::ChangeReply>, Status> {
        self.change(r, |r| convert::link(r, true)).await
    }
    async fn unlink_subsystem(
        &self,
        r: Request<pb::PortLink>,
    ) -> Result<Response<pb::ChangeReply>, Status> {
        self.change(r, |r| convert::link(r, false)).await
    }
    async fn set_namespace_qos(
        &self,
        r: Request<pb::SetNamespaceQosRequest>,
    ) -> Result<Response<pb::ChangeReply>, Status> {
        self.change(r, convert::set_namespace_qos).await
    }
    async fn set_ana_state(
        &self,
        r: Request<pb::SetAnaStateRequest>,
    ) -> Result<Response<pb::ChangeReply>, Status> {
        self.change(r, convert::set_ana_state).await
    }

    async fn reload(
        &self,
        r: Request<pb::ReloadRequest>,
    ) -> Result<Response<pb::ChangeReply>, Status> {
        let client = self.authorize(&r, ManagementRole::Admin)?;
        info!(%client, "management API reload");
        let live = self.live.clone();
        match tokio::task::spawn_blocking(move || live.reload()).await {
            Ok(Ok(changes)) => Ok(Response::new(pb::ChangeReply { changes })),
            Ok(Err(e)) => Err(convert::status_of(&e)),
            Err(e) => Err(Status::internal(format!("the reload did not finish: {e}"))),
        }
    }

    async fn export(
        &self,
        r: Request<pb::ExportRequest>,
    ) -> Result<Response<pb::ExportReply>, Status> {
        self.query(&r, |live| {
            live.export()
                .map(|config_yaml| pb::ExportReply { config_yaml })
                .map_err(Status::internal)
        })
        .await
    }

    async fn get_status(
        &self,
        r: Request<pb::GetStatusRequest>,
    ) -> Result<Response<pb::StatusReply>, Status> {
        self.query(&r, |live| convert::status_reply(&live.status()))
            .await
    }

    async fn list_connections(
        &self,
        r: Request<pb::ListConnectionsRequest>,
    ) -> Result<Response<pb::ListConnectionsReply>, Status> {
        let subsystem = r.get_ref().subsystem_nqn.clone();
        self.query(&r, move |live| {
            let discovery = live.target().discovery.nqn.to_string();
            Ok(pb::ListConnectionsReply {
                connections: convert::connections(&live.status(), &discovery, &subsystem),
            })
        })
        .await
    }

    async fn get_namespace_stats(
        &self,
        r: Request<pb::GetNamespaceStatsRequest>,
    ) -> Result<Response<pb::NamespaceStatsReply>, Status> {
        let pb::GetNamespaceStatsRequest {
            subsystem_nqn,
            nsid,
        } = r.get_ref().clone();
        self.query(&r, move |live| {
            let snap = crate::metrics::snapshot(live.target());
            let namespaces = convert::namespace_stats(&snap, &subsystem_nqn, nsid);
            let asked_one = !subsystem_nqn.is_empty() && nsid != 0;
            if asked_one && namespaces.is_empty() {
                return Err(Status::not_found(format!(
                    "subsystem {subsystem_nqn} has no namespace {nsid}"
                )));
            }
            Ok(pb::NamespaceStatsReply { namespaces })
        })
        .await
    }

    async fn get_metrics(
        &self,
        r: Request<pb::GetMetricsRequest>,
    ) -> Result<Response<pb::MetricsReply>, Status> {
        self.query(&r, |live| {
            let snap = crate::metrics::snapshot(live.target());
            serde_json::to_string(&snap)
                .map(|snapshot_json| pb::MetricsReply { snapshot_json })
                .map_err(|e| Status::internal(e.to_string()))
        })
        .await
    }

    type WatchEventsStream = EventStream;

    async fn watch_events(
        &self,
        r: Request<pb::WatchEventsRequest>,
    ) -> Result<Response<EventStream>, Status> {
        let client = self.authorize(&r, ManagementRole::Reader)?;
        info!(%client, "management API: event stream opened");
        let mut events = self.live.target().events.subscribe();
        let mut stopping = self.stopping.clone();
        let (tx, rx) = mpsc::channel(STREAM_QUEUE);
        // The forwarder ends when the client goes away (send fails) or at shutdown.
        tokio::spawn(async move {
            loop {
                let next = tokio::select! {
                    e = events.recv() => e,
                    _ = stopping.wait_for(|s| *s) => break,
                };
                let out = match next {
                    Ok(e) => convert::event(&e),
                    Err(broadcast::error::RecvError::Lagged(n)) => convert::events_lost(n),
                    Err(broadcast::error::RecvError::Closed) => break,
                };
                if tx.send(Ok(out)).await.is_err() {
                    break;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}
